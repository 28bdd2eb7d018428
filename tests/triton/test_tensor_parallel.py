"""The multi-rank launch argv (tensor-parallel size 2) really starts under Open MPI, in leader mode."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mmd_testbed.triton.doubles import codec
from mmd_testbed.triton.localserver import TritonInstall
from mmd_testbed.triton.serving import serve
from tests.triton.serving import load_example
from tests.triton.test_conformance import ask, image_request

EXAMPLE = "llava-tp2-fp8"


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def test_tp2_argv_starts_under_mpirun(
    triton_install: TritonInstall, tmp_path: Path, say: Callable[[str], None]
) -> None:
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun is missing: run `make triton-server` (installs openmpi-bin)", pytrace=False)
    plan = load_example(EXAMPLE)
    with serve(EXAMPLE, plan, triton_install, tmp_path, say) as served:
        # Exactly the operator's argv: only the tritonserver path, the repository and the ports differ.
        local, ports = served.launch.argv, served.ports
        assert len(plan.launch.argv) == len(local) and local[0] == "mpirun"
        substitutions = {
            "/opt/tritonserver/bin/tritonserver": str(triton_install.tritonserver),
            "--model-repository=/models": f"--model-repository={served.repository}",
            "--http-port=8000": f"--http-port={ports.http}",
            "--grpc-port=8001": f"--grpc-port={ports.grpc}",
            "--metrics-port=8002": f"--metrics-port={ports.metrics}",
        }
        assert [substitutions.get(arg, arg) for arg in plan.launch.argv] == list(local)
        assert local.count(":") == 2 and "--load-model=tensorrt_llm" in local
        tensors, _ = image_request(served, tmp_path, stream=True)
        seen = codec.parse_digest("".join(ask(served, "grpc", tensors)))
        assert seen["type"]["name"] == "llava" and seen["llm"]["streaming"] == "1"
        deadline = time.monotonic() + 30
        while "rank 1 waits for the leader" not in served.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, "rank 1's tensorrt_llm double never started loading"
            time.sleep(0.2)
        text = served.log.read_text(errors="replace")
        # Leader mode: rank 1 never finishes loading, so only rank 0 opened the shared ports.
        assert text.count("Started HTTPService") == 1
        assert "rank 0 waits" not in text
        assert served.process.pid is not None
    assert _processes_mentioning(str(served.repository)) == []
