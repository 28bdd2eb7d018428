"""Running the trtllm-serve double as a real subprocess: model directories, start, stop, raw calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mmd_testbed.ports import free_port

MODULE = "mmd_testbed.trtllm_serve"
START_TIMEOUT_SECONDS = 20.0
CALL_TIMEOUT_SECONDS = 20.0


def model_dir(root: Path, architecture: str, model_type: str, name: str | None = None) -> Path:
    """A Hugging Face snapshot as far as the double reads one: a directory with its config.json."""
    path = root / (name or model_type)
    path.mkdir(parents=True, exist_ok=True)
    config = {"architectures": [architecture], "model_type": model_type, "torch_dtype": "bfloat16"}
    (path / "config.json").write_text(json.dumps(config))
    return path


def run_cli(args: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`trtllm-serve ARGS` (the double) to completion: for the refusals, which exit before serving."""
    return subprocess.run(
        [sys.executable, "-m", MODULE, *args],
        capture_output=True,
        text=True,
        timeout=CALL_TIMEOUT_SECONDS,
        env={**os.environ, **(env or {})},
        check=False,
    )


@dataclass
class Double:
    """A running double: its base URL, process and log."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        """SIGTERM, then wait (kill after 10 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start(
    model: Path, log_dir: Path, args: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> Double:
    """`trtllm-serve MODEL --host 127.0.0.1 --port P --backend pytorch ARGS`, once /health answers 200."""
    port = free_port()
    log = log_dir / f"trtllm-serve-{model.name}-{port}.log"
    argv = [sys.executable, "-m", MODULE, str(model), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--backend", "pytorch", *args]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    double = Double(f"http://127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the double exited with {process.returncode}:\n{log.read_text()}", pytrace=False)
        try:
            with urllib.request.urlopen(f"{double.url}/health", timeout=2) as response:
                if response.status == 200:
                    return double
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    double.stop()
    pytest.fail(f"the double did not answer /health in {START_TIMEOUT_SECONDS} s:\n{log.read_text()}")


@dataclass(frozen=True)
class Reply:
    """A raw HTTP answer."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


def call(url: str, payload: Any = None, method: str | None = None) -> Reply:
    """One raw HTTP call with urllib (JSON body when `payload` is given); any status is returned."""
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method=method or ("POST" if data else "GET"))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_SECONDS) as response:
            return Reply(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        return Reply(error.code, dict(error.headers), error.read())


def sse_events(body: bytes) -> Iterator[str]:
    """The `data:` payloads of a server-sent-events body, in order."""
    for block in body.decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            yield block[len("data: ") :]


def chat_request(parts: list[dict[str, Any]] | str, **fields: Any) -> dict[str, Any]:
    """A chat request with one user message."""
    return {"model": "served", "messages": [{"role": "user", "content": parts}], **fields}
