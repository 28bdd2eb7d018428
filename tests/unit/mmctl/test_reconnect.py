"""mmctl sends a request again only when no connection was made: the rule, and both clients on sockets."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from mmctl import main, reconnect
from mmd_testbed.ports import free_port
from mmd_testbed.triton import media


class NotConnectedError(Exception):
    pass


def _attempts(*outcomes: Exception | str) -> tuple[list[int], object]:
    calls: list[int] = []

    def attempt() -> str:
        calls.append(1)
        outcome = outcomes[len(calls) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return calls, attempt


def _with_reconnects(attempt: object, retries: int, command: str = "chat") -> object:
    return reconnect.with_reconnects(
        attempt,  # type: ignore[arg-type]
        never_connected=lambda error: isinstance(error, NotConnectedError),
        retries=retries,
        command=command,
    )


def test_a_request_that_never_connected_is_sent_again_and_each_try_is_said(
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls, attempt = _attempts(NotConnectedError("refused"), NotConnectedError("timed out"), "answer")
    answer = _with_reconnects(attempt, retries=3, command="infer")
    assert answer == "answer" and len(calls) == 3
    said = capsys.readouterr().err.splitlines()
    assert said == [
        "mmctl infer: no connection (refused); trying again (1 of 3)",
        "mmctl infer: no connection (timed out); trying again (2 of 3)",
    ]


def test_a_request_that_reached_a_server_is_never_sent_again() -> None:
    calls, attempt = _attempts(ValueError("the server refused it"), "answer")
    with pytest.raises(ValueError, match="the server refused it"):
        _with_reconnects(attempt, retries=3)
    assert len(calls) == 1


def test_the_tries_are_bounded_and_the_last_failure_is_raised() -> None:
    calls, attempt = _attempts(*(NotConnectedError(f"try {n}") for n in range(5)))
    with pytest.raises(NotConnectedError, match="try 2"):
        _with_reconnects(attempt, retries=2)
    assert len(calls) == 3


def test_infer_over_grpc_tries_a_refused_connection_again_then_says_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("tritonclient.grpc")
    url = f"grpc://127.0.0.1:{free_port()}"
    picture = media.image(tmp_path / "picture.jpg")
    arguments = ["--model-type", "llava", "--image", str(picture), "--connect-retries", "2"]
    code = main.main(["infer", "--url", url, *arguments])
    err = capsys.readouterr().err
    assert code == 1
    assert "trying again (1 of 2)" in err and "trying again (2 of 2)" in err
    assert "failed to connect" in err.splitlines()[-1] and err.splitlines()[-1].startswith("mmctl infer:")


class _ChatServer(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible server's two answers `mmctl chat` needs; `status` for every request."""

    status = 200

    def do_GET(self) -> None:
        model = {"id": "m", "object": "model", "created": 0, "owned_by": "x"}
        self._answer({"object": "list", "data": [model]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        message = {"role": "assistant", "content": "a red square"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        completion = {"id": "c", "object": "chat.completion", "created": 0, "model": "m"}
        self._answer({**completion, "choices": [choice]})

    def _answer(self, body: dict[str, object]) -> None:
        data = json.dumps(body if self.status == 200 else {"error": "broken"}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass


@dataclass
class LateServer:
    """A chat server on a port that refuses connections until `open()` (once) starts it."""

    port: int
    handler: type[_ChatServer]
    opened: threading.Event = field(default_factory=threading.Event)

    def open(self) -> None:
        self.opened.set()


@pytest.fixture
def late_server() -> Iterator[LateServer]:
    late = LateServer(free_port(), type("Handler", (_ChatServer,), {}))
    servers: list[http.server.ThreadingHTTPServer] = []
    listening = threading.Event()

    def serve_when_opened() -> None:
        if not late.opened.wait(30):
            return
        server = http.server.ThreadingHTTPServer(("127.0.0.1", late.port), late.handler)
        servers.append(server)
        listening.set()
        server.serve_forever(poll_interval=0.05)

    thread = threading.Thread(target=serve_when_opened, daemon=True)
    thread.start()
    yield late
    late.open()
    listening.wait(5)
    for server in servers:
        server.shutdown()
        server.server_close()
    thread.join(5)


def test_chat_connects_again_until_the_server_answers(
    capsys: pytest.CaptureFixture[str], late_server: LateServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("openai")
    pause = reconnect.time.sleep

    def open_then_pause(seconds: float) -> None:
        # The server starts listening only once mmctl has been refused and pauses to try again: the
        # first try is refused however long mmctl takes to start.
        late_server.open()
        pause(seconds)

    monkeypatch.setattr(reconnect, "time", SimpleNamespace(sleep=open_then_pause))
    code = main.main(
        [
            "chat",
            "--url",
            f"http://127.0.0.1:{late_server.port}",
            "--text",
            "what is this",
            "--connect-retries",
            "20",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.strip() == "a red square"
    assert "mmctl chat: no connection" in err and "trying again (1 of 20)" in err


def test_chat_does_not_send_again_what_the_server_refused(
    capsys: pytest.CaptureFixture[str], late_server: LateServer
) -> None:
    pytest.importorskip("openai")
    late_server.handler.status = 500
    late_server.open()
    _wait_until_listening(late_server.port)
    code = main.main(
        ["chat", "--url", f"http://127.0.0.1:{late_server.port}", "--model", "m", "--text", "hi"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "HTTP 500" in err and "trying again" not in err


def _wait_until_listening(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"the chat server never listened on {port}")
