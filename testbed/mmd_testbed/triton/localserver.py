"""Run a real tritonserver on this machine: the one from the nvidia-pytriton wheel, for tests and benchmarks.

`scripts/install-tritonserver.sh` (run by `make test`) unpacks the wheel into `<venv>/tritonserver/` and
writes a `bin/tritonserver` wrapper that sets the loader path and the backend directory and binds loopback
only; everything else on the command line is the launch argv the operator computes (`plan.launch`). This
module finds that install, picks free loopback ports, starts an argv in its own process group (bound to this
process, so it dies with it), waits for strict readiness and stops the whole group (and removes the shared
memory its Python stubs mapped). Part of the triton adapter: imports the standard library, psutil and our
plan's port type.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from mmd_operator.plan.launch import Ports
from mmd_testbed.ports import free_ports

INSTALL_HINT = "run `make triton-server` (scripts/install-tritonserver.sh) first"
# Overrides where the install is looked for (default: <sys.prefix>/tritonserver, i.e. inside the venv).
HOME_ENV = "MMD_TRITONSERVER_HOME"
# Open MPI in a sandbox: shared memory and loopback only, no ssh agent, no PMIx shared-memory data store.
MPI_ENV = {
    "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
    "OMPI_MCA_plm_rsh_agent": "",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "PMIX_MCA_gds": "hash",
}
_PR_SET_PDEATHSIG = 1


class TritonNotInstalledError(Exception):
    """The test tritonserver is not installed where it is looked for."""


class ServerFailedError(Exception):
    """The server exited or did not become ready in time."""


@dataclass(frozen=True)
class TritonInstall:
    """Paths of an installed test tritonserver."""

    home: Path

    @property
    def tritonserver(self) -> Path:
        """The wrapper to use as launch_plan's `tritonserver`."""
        return self.home / "bin" / "tritonserver"

    @property
    def stub_site(self) -> Path:
        """Packages (numpy 1.x, Pillow) the Python backend stub's interpreter can import."""
        return self.home / "stub-site"

    @classmethod
    def discover(cls, home: Path | None = None) -> TritonInstall:
        """Find the install.

        Raises:
            TritonNotInstalledError: with the command that installs it.
        """
        if home is None:
            home = Path(os.environ.get(HOME_ENV) or Path(sys.prefix) / "tritonserver")
        install = cls(home)
        if not os.access(install.tritonserver, os.X_OK) or not install.stub_site.is_dir():
            raise TritonNotInstalledError(f"no test tritonserver in {home}: {INSTALL_HINT}")
        return install


def free_port_set() -> Ports:
    """Ports for one server (HTTP, gRPC, metrics), all free on loopback."""
    http, grpc, metrics = free_ports(3)
    return Ports(http=http, grpc=grpc, metrics=metrics)


def _die_with_parent() -> None:
    """Run in the child before exec: get SIGTERM when the process that started us dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _ready(http_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=2) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


class LocalServer:
    """One started argv (a tritonserver, or mpirun with several) and its log."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        http_port: int,
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.argv = tuple(argv)
        self.http_port = http_port
        self.log_path = log_path
        self._env = dict(os.environ) | dict(env or {})
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """Process id of the started argv (leader of its process group)."""
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        """Start the argv in a new process group, output to the log file."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # no threads are started before exec
            )

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, timeout: float = 120.0, interval: float = 0.2) -> float:
        """Wait until `/v2/health/ready` answers 200; return the seconds it took.

        Raises:
            ServerFailedError: if the process exits first or the timeout passes.
        """
        assert self._process is not None, "start() first"
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            code = self._process.poll()
            if code is not None:
                raise ServerFailedError(
                    f"{Path(self.argv[0]).name} exited with {code} before it was ready; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if _ready(self.http_port):
                return time.monotonic() - started
            time.sleep(interval)
        raise ServerFailedError(
            f"not ready after {timeout:.0f} s on port {self.http_port}; "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def stop(self, grace: float = 20.0) -> int | None:
        """Stop the server and every process it started; returns the leader's exit code.

        SIGTERM to the leader first, then SIGKILL to whatever of its family is left, and wait until all of
        it is gone, so a caller that returns from here finds no process of this server. The shared memory
        its Python stubs mapped goes too: a stub that mpirun ends with SIGKILL leaves its regions in
        /dev/shm, about 1 MB each, which would fill the machine's memory run after run.
        """
        process = self._process
        if process is None:
            return None
        # Note the family before the leader ends: Open MPI ranks and Python stubs may sit in their own
        # sessions, and once the leader is gone they are nobody's children any more.
        family = _family(process.pid)
        regions = _shared_memory(family)
        if process.poll() is None:
            # The leader first: tritonserver unloads its models (and mpirun ends its ranks) in order;
            # signalling the Python stubs at the same time would leave it waiting on dead stubs.
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=grace)
        family += [member for member in _family(process.pid) if member not in family]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        for member in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.kill()
        psutil.wait_procs(family, timeout=grace)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
        for region in regions:
            region.unlink(missing_ok=True)
        return process.returncode


def _shared_memory(family: list[psutil.Process]) -> set[Path]:
    """The files under /dev/shm that `family` maps (the Python backend's regions)."""
    regions: set[Path] = set()
    for member in family:
        with contextlib.suppress(psutil.Error):
            regions |= {
                Path(mapped.path) for mapped in member.memory_maps() if mapped.path.startswith("/dev/shm/")
            }
    return regions


def _family(pid: int) -> list[psutil.Process]:
    """`pid` and all its descendants (empty once it is gone)."""
    try:
        leader = psutil.Process(pid)
        return [leader, *leader.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


@contextlib.contextmanager
def running(
    argv: Sequence[str],
    *,
    http_port: int,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
    on_ready: Callable[[float], None] | None = None,
) -> Iterator[LocalServer]:
    """Start `argv`, wait for readiness, yield the server, and stop it however the block ends."""
    server = LocalServer(argv, http_port=http_port, log_path=log_path, env=env)
    server.start()
    try:
        seconds = server.wait_ready(timeout=timeout)
        if on_ready is not None:
            on_ready(seconds)
        yield server
    finally:
        server.stop()
