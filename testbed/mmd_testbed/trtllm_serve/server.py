"""The double's HTTP server: the real trtllm-serve's routes, answers and error shapes on a CPU.

Routes as openai_server.py registers them for a served LLM: `GET /health` (200, empty body), `GET /version`
(`{"version": ...}`), `GET /v1/models` (one ModelCard: the model directory's name, owned by `tensorrt_llm`),
`GET /metrics` (JSON iteration stats: the double has none, `[]`), `POST /v1/chat/completions` (JSON or, with
`stream`, server-sent events `data: {...}` ending `data: [DONE]`) and, only when the LlmArgs set
`return_perf_metrics`, `GET /prometheus/metrics` with the collector's metric names (labels `model_name` and
`engine_type`, which 1.2-era code sets to `undefined`). Anything else is 404 `{"detail": "Not Found"}`, as
FastAPI answers. At most `max_batch_size` requests are answered at once (the rest wait, which the queue-time
histogram shows), each after MMD_DOUBLE_DELAY_SECONDS or the snapshot's `seconds_per_request` knob (for
saturation and slow-canary tests); with its `fail_share` knob that share of requests is answered 400, as
the real server answers an exception in the chat route, and not counted in the metrics. Rank 0 of an MPI
world that spans hosts says so in every answer (`chat.answer`), and ends the world when it stops
(`world.farewell`). Imports prometheus_client, the standard library and the Triton doubles' `world`.
"""

from __future__ import annotations

import http.server
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from mmd_testbed.triton.doubles import world as mpi_world
from mmd_testbed.trtllm_serve import chat, media
from mmd_testbed.trtllm_serve.facts import PINNED_VERSION
from mmd_testbed.trtllm_serve.models import ServedModel

DELAY_ENV = "MMD_DOUBLE_DELAY_SECONDS"
METRIC_LABELS = {"model_name": "undefined", "engine_type": "undefined"}
FINISHED_REASON = "finished_reason"
MAX_BODY_BYTES = 256 * 1024 * 1024
NOT_FOUND = 404
METHOD_NOT_ALLOWED = 405
CHAT_PATH = "/v1/chat/completions"
GET_PATHS = ("/health", "/version", "/v1/models", "/metrics")


class ServeError(Exception):
    """The server cannot start; the message is what the real server would say."""


@dataclass(frozen=True)
class ServeSettings:
    """What the server needs from the command line, the YAML and the environment."""

    host: str
    port: int
    served: ServedModel
    max_batch_size: int
    return_perf_metrics: bool
    video_frames: int
    media_policy: media.MediaPolicy
    delay_seconds: float
    # The MPI world rank 0 joined (trtllm-llmapi-launch), None outside MPI.
    world: mpi_world.World | None = None

    @property
    def world_line(self) -> str | None:
        """What answers say of the world: only when it spans hosts (one host answers as before)."""
        return self.world.summary() if self.world is not None and self.world.spans_hosts else None


def delay_from_env() -> float:
    """MMD_DOUBLE_DELAY_SECONDS as a non-negative float (0 when unset)."""
    raw = os.environ.get(DELAY_ENV, "")
    try:
        delay = float(raw) if raw.strip() else 0.0
    except ValueError as error:
        raise ServeError(f"{DELAY_ENV}={raw!r} is not a number of seconds") from error
    if delay < 0:
        raise ServeError(f"{DELAY_ENV}={raw!r} is negative")
    return delay


class Metrics:
    """The Prometheus metrics, named as the facts list them: *_total counters, *_seconds histograms."""

    def __init__(self, names: tuple[str, ...]) -> None:
        # The real server's multiprocess registry exposes no `_created` samples.
        disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated
        self.registry = CollectorRegistry()
        self._metrics: dict[str, Counter | Histogram | Gauge] = {}
        labels = list(METRIC_LABELS)
        for name in names:
            if name.endswith("_total"):
                self._metrics[name] = Counter(name, name, [*labels, FINISHED_REASON], registry=self.registry)
            elif name.endswith("_seconds"):
                self._metrics[name] = Histogram(name, name, labels, registry=self.registry)
            else:
                self._metrics[name] = Gauge(name, name, labels, registry=self.registry)

    def _find(self, suffix: str) -> Counter | Histogram | Gauge | None:
        return next((m for name, m in self._metrics.items() if name.endswith(suffix)), None)

    def finished(self, reason: str, seconds: dict[str, float]) -> None:
        """Record a finished request: success counter by finish reason, and each timing by its name."""
        counter = self._find("request_success_total")
        if isinstance(counter, Counter):
            counter.labels(**METRIC_LABELS, finished_reason=reason).inc()
        for suffix, value in seconds.items():
            histogram = self._find(suffix)
            if isinstance(histogram, Histogram):
                histogram.labels(**METRIC_LABELS).observe(value)

    def exposition(self) -> bytes:
        """The text format."""
        return generate_latest(self.registry)


class DoubleServer(http.server.ThreadingHTTPServer):
    """A threading HTTP server holding the settings, the batch slots and the metrics."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, settings: ServeSettings, metric_names: tuple[str, ...]) -> None:
        self.settings = settings
        self.slots = threading.BoundedSemaphore(max(settings.max_batch_size, 1))
        self.requests_seen = 0
        self.seen_lock = threading.Lock()
        self.metrics = Metrics(metric_names) if settings.return_perf_metrics else None
        try:
            super().__init__((settings.host, settings.port), _Handler)
        except OSError as error:
            raise ServeError(f"Failed to bind socket to {settings.host}:{settings.port}: {error}") from error

    def fails_now(self) -> chat.ApiError | None:
        """With the snapshot's `fail_share` knob, the error answer of this request when it is in the share."""
        share = self.settings.served.knobs.get("fail_share", 0.0)
        with self.seen_lock:
            self.requests_seen += 1
            seen = self.requests_seen
        if math.floor(seen * share) > math.floor((seen - 1) * share):
            return chat.bad_request(f"request {seen} fails: the snapshot fails {share:g} (fail_share)")
        return None


class _Handler(http.server.BaseHTTPRequestHandler):
    server: DoubleServer
    server_version = "uvicorn"  # what clients of the real server see in `Server:`
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"INFO:     {self.address_string()} - {format % args}\n")

    # --- plumbing ------------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise chat.invalid_body(ValueError(f"request body larger than {MAX_BODY_BYTES} bytes"))
        return self.rfile.read(length)

    # --- routes --------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        """Health, version, models, iteration stats and (with return_perf_metrics) Prometheus metrics."""
        path = self.path.split("?", 1)[0]
        settings = self.server.settings
        if path == "/health":
            self._send(200, b"", "text/plain; charset=utf-8")
        elif path == "/version":
            self._json(200, {"version": PINNED_VERSION})
        elif path == "/v1/models":
            card = {
                "id": settings.served.model_id,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "tensorrt_llm",
            }
            self._json(200, {"object": "list", "data": [card]})
        elif path == "/metrics":
            self._json(200, [])
        elif path.startswith("/prometheus/metrics") and self.server.metrics is not None:
            self._send(200, self.server.metrics.exposition(), CONTENT_TYPE_LATEST)
        elif path == CHAT_PATH:
            self._json(METHOD_NOT_ALLOWED, {"detail": "Method Not Allowed"})
        else:
            self._json(NOT_FOUND, {"detail": "Not Found"})

    def do_POST(self) -> None:
        """Chat completions."""
        path = self.path.split("?", 1)[0]
        if path != CHAT_PATH:
            if path in GET_PATHS:
                self._json(METHOD_NOT_ALLOWED, {"detail": "Method Not Allowed"})
            else:
                self._json(NOT_FOUND, {"detail": "Not Found"})
            return
        arrived = time.perf_counter()
        try:
            request = chat.parse_request(self._body())
            settings = self.server.settings
            answer = chat.answer(
                request, settings.served, settings.media_policy, settings.video_frames, settings.world_line
            )
        except chat.ApiError as error:
            self._json(error.status, error.body)
            return
        with self.server.slots:
            queued = time.perf_counter() - arrived
            if settings.delay_seconds:
                time.sleep(settings.delay_seconds)
            failure = self.server.fails_now()
            if failure is not None:
                # Answered as the real server answers an exception in the chat route, and not counted.
                self._json(failure.status, failure.body)
                return
            first = time.perf_counter() - arrived
            if request.stream:
                self._stream(chat.chunks(request, answer))
            else:
                self._json(200, chat.completion(request, answer))
        if self.server.metrics is not None:
            total = time.perf_counter() - arrived
            per_token = (total - first) / max(len(answer.tokens) - 1, 1)
            self.server.metrics.finished(
                answer.finish_reason,
                {
                    "e2e_request_latency_seconds": total,
                    "time_to_first_token_seconds": first,
                    "time_per_output_token_seconds": per_token,
                    "request_queue_time_seconds": queued,
                },
            )

    def _stream(self, bodies: Iterator[dict[str, Any]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for body in bodies:
            self.wfile.write(f"data: {json.dumps(body)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def serve_forever(settings: ServeSettings, metric_names: tuple[str, ...]) -> None:
    """Bind, say where, and answer until SIGTERM or SIGINT."""
    server = DoubleServer(settings, metric_names)
    served = settings.served
    print(
        f"[trtllm-serve double {PINNED_VERSION}] serving {served.model_id} ({served.architecture.name}) "
        f"on http://{settings.host}:{server.server_address[1]}",
        file=sys.stderr,
        flush=True,
    )
    signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if settings.world is not None and not mpi_world.farewell(settings.world):
            print("[trtllm-serve double] the MPI world did not end in order", file=sys.stderr, flush=True)
