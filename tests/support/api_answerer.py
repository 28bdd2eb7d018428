"""A plain HTTP server on 127.0.0.1 standing in for the API server, and a client for it.

For the few unit cases that need what the local control plane has not (a server address with a path, a
proxy) or a cluster it cannot stage (a node that stays silent while the others renew).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client as k8s

from mmd_operator.kube.client import KubeClient


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Server:
    url: str
    seen: list[Seen] = field(default_factory=list)
    # A str answer goes as text/plain (a pod's log).
    answers: dict[str, tuple[int, dict[str, Any] | str]] = field(default_factory=dict)


@pytest.fixture
def server() -> Iterator[Server]:
    """The answerer, running; `answers` maps a path's ending to (status, body)."""
    record = Server(url="")

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            record.seen.append(
                Seen(self.command, self.path, dict(self.headers), json.loads(raw) if raw else None)
            )
            status, answer = next(
                (
                    found
                    for suffix, found in record.answers.items()
                    if self.path.split("?")[0].endswith(suffix)
                ),
                (200, {"kind": "ConfigMap", "metadata": {"name": "answer"}}),
            )
            text = isinstance(answer, str)
            payload = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if text else "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._answer()

        def do_PATCH(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def log_message(self, *_: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    record.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield record
    finally:
        httpd.shutdown()
        httpd.server_close()


def make_client(host: str, *, proxy: str | None = None) -> KubeClient:
    configuration = k8s.Configuration(host=host, api_key={"authorization": "sekret"})
    configuration.api_key_prefix = {"authorization": "Bearer"}
    configuration.proxy = proxy
    return KubeClient(k8s.ApiClient(configuration), field_manager="test-manager", agent="test-agent/1")
