"""The operator process: logging, the metrics endpoint, leader election, and kopf running the handlers.

`python -m mmd_operator` (the operator image's entry point, also run from a checkout) calls `run`.
Settings come from
`MMD_*` environment variables (see `config`), the namespaces from the command line or
`MMD_NAMESPACES`; none means all. One of the two modules that import kopf.

With leader election (`MMD_LEADER_ELECTION`, on in the chart) the election wraps kopf's start: a standby
runs no kopf at all (no watch, no listing, no cache), only the elector's reads of the Lease and a bare
`/healthz`; once it holds the lease kopf starts, and the controller lists everything as at any start.
A leader that loses its lease exits at once (exit code 3) for Kubernetes to restart it as a standby:
kopf's watches, the queue and the reconciles running in threads cannot all be stopped and started
again in one process, and an exit stops them all. Its API client refuses writes from the moment the
renew deadline passes, so nothing is written between the loss and the exit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ctypes.util
import json
import logging
import os
import secrets
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kopf
from prometheus_client import start_http_server

from mmd_operator import __version__, handlers, metrics
from mmd_operator.config import ConfigError, OperatorConfig
from mmd_operator.election import Timings
from mmd_operator.kube.client import KubeClient, user_agent
from mmd_operator.kube.lease import Leases, home_namespace
from mmd_operator.leadership import LeaderElector, Outcome

_log = logging.getLogger("mmd_operator")
_M_ARENA_MAX = -8  # mallopt's parameter number, from glibc's malloc.h
EXIT_LEASE_LOST = 3


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(config: OperatorConfig) -> None:
    """Log to stderr as text or JSON lines; kopf's own chatter and HTTP access lines only from WARNING."""
    handler = logging.StreamHandler()
    if config.log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.log_level.upper())
    logging.getLogger("kopf").setLevel(max(logging.WARNING, root.level))
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    # One access line per probe and scrape (every few seconds) would be all an admin sees at rest.
    logging.getLogger("aiohttp.access").setLevel(max(logging.WARNING, root.level))


def limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's malloc arenas before any thread starts.

    glibc gives each thread that allocates its own arena (up to eight per core), and each keeps what it
    freed; with the reconcile workers parsing API answers in parallel that was tens of MiB of resident
    memory at a thousand resources. Two arenas cost nothing measurable in speed. Elsewhere than glibc
    this does nothing.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(_M_ARENA_MAX, arenas)
    except (OSError, AttributeError):
        pass


def election_identity(config: OperatorConfig) -> str:
    """The pod's name (the host name outside a pod) and a random suffix: each process is a new candidate."""
    return f"{config.pod_name or socket.gethostname()}-{secrets.token_hex(3)}"


class _StandbyHealth(BaseHTTPRequestHandler):
    """`/healthz` of a standby, which runs no kopf (and so no kopf liveness endpoint) yet."""

    def do_GET(self) -> None:
        found = self.path.split("?")[0] == "/healthz"
        body = b'{"standby": true}\n' if found else b""
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds are not worth a line each."""


@contextlib.contextmanager
def standby_health(port: int) -> Iterator[None]:
    """Answer `/healthz` on `port` while standing by; the port is free again (for kopf) afterwards."""
    server = ThreadingHTTPServer(("0.0.0.0", port), _StandbyHealth)
    thread = threading.Thread(target=server.serve_forever, name="standby-health", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def _elector(config: OperatorConfig, identity: str) -> LeaderElector:
    # A client of its own (no write guard, no retries by the connection pool: the deadline is the
    # elector's), under the same identity, so the audit log tells the replicas' requests apart.
    client = KubeClient.from_environment(
        field_manager=config.field_manager, agent=user_agent(identity), retries=0
    )
    leases = Leases(client, config.lease_namespace or home_namespace(), config.lease_name)
    timings = Timings(
        config.lease_duration_seconds, config.lease_renew_deadline_seconds, config.lease_retry_seconds
    )
    return LeaderElector(leases, identity, timings)


def _exit_when_lost(elector: LeaderElector, stop: threading.Event, on_leading: Callable[[], None]) -> None:
    """The election thread: run the candidate; a lost lease (or a failed election) ends the process."""
    try:
        outcome = elector.run(stop, on_leading)
    except Exception:
        _log.exception("The leader election failed; exiting")
        outcome = Outcome.LOST
    if outcome is Outcome.LOST:
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(EXIT_LEASE_LOST)  # no clean-up: threads mid-reconcile must not get to write


def run(config: OperatorConfig) -> int:
    """Run the operator until SIGINT or SIGTERM; returns the exit code."""
    limit_malloc_arenas()
    configure_logging(config)
    start_http_server(config.metrics_port)
    namespaces = list(config.namespaces)
    where = ", ".join(namespaces) if namespaces else "all namespaces"
    _log.info("mmd-operator %s watching %s; metrics on :%d/metrics", __version__, where, config.metrics_port)
    identity = election_identity(config)
    elector = _elector(config, identity) if config.leader_election else None
    stop = asyncio.Event()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        stop_electing = threading.Event()
        election: threading.Thread | None = None
        if elector is not None:
            leading = asyncio.Event()
            election = threading.Thread(
                target=_exit_when_lost,
                args=(elector, stop_electing, lambda: loop.call_soon_threadsafe(leading.set)),
                name="leader-election",
                daemon=True,
            )
            with standby_health(config.health_port):
                election.start()
                waits = [asyncio.create_task(leading.wait()), asyncio.create_task(stop.wait())]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for task in waits:
                    task.cancel()
        else:
            metrics.IS_LEADER.set(1)
        try:
            if not stop.is_set():
                await kopf.operator(
                    standalone=True,
                    clusterwide=not namespaces,
                    namespaces=namespaces,
                    liveness_endpoint=f"http://0.0.0.0:{config.health_port}/healthz",
                    memo=kopf.Memo(
                        config=config,
                        agent=user_agent(identity if elector else None),
                        writes_allowed=elector.leading if elector else None,
                    ),
                    stop_flag=stop,
                )
        finally:
            # Only now, with every reconcile finished, is the lease handed back.
            stop_electing.set()
            if election is not None:
                await asyncio.to_thread(election.join)

    asyncio.run(main())
    return 0


def parser(prog: str = "python -m mmd_operator") -> argparse.ArgumentParser:
    """The operator's command line (`python -m mmd_operator`)."""
    command = argparse.ArgumentParser(
        prog=prog,
        description="Run the MultimodalDeployment operator against the current kubeconfig "
        "(or the in-cluster service account).",
    )
    add_arguments(command)
    return command


def add_arguments(command: argparse.ArgumentParser) -> None:
    """The operator's options, on any parser."""
    command.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch this namespace (repeatable; default: all)",
    )
    command.add_argument("--workers", type=int, help="resources reconciled at once (MMD_WORKERS)")
    command.add_argument("--metrics-port", type=int, help="port of /metrics (MMD_METRICS_PORT)")
    command.add_argument("--health-port", type=int, help="port of /healthz (MMD_HEALTH_PORT)")


def config_from(args: argparse.Namespace) -> OperatorConfig:
    """Environment settings, overridden by the command line.

    Raises:
        ConfigError: naming the setting that cannot be used.
    """
    config = OperatorConfig.from_env()
    changes: dict[str, object] = {}
    if args.namespace:
        changes["namespaces"] = tuple(args.namespace)
    for name in ("workers", "metrics_port", "health_port"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    return config.with_changes(**changes)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m mmd_operator`."""
    args = parser().parse_args(argv)
    try:
        config = config_from(args)
    except ConfigError as error:
        print(f"mmd-operator: {error}", file=sys.stderr)
        return 2
    return run(config)


__all__ = ["handlers", "main", "run"]
