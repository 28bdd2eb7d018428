"""Running commands under a real `mpirun` on this machine (loopback and shared memory only), for the tests of
the doubles' MPI worlds."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence

import pytest

from mmd_testbed.triton.localserver import MPI_ENV

PYTHON = sys.executable
# Each rank in a UTS namespace of its own, on the host name given first: two "hosts" on one machine.
AS_HOST = 'hostname "$0" && exec "$@"'


def require_mpi() -> None:
    """Skip unless Open MPI's mpirun and mpi4py are here (`make triton-server`, the dev group)."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is missing: `make triton-server` installs Debian's openmpi-bin")
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is missing: `make venv` installs it (the dev group)")


def require_uts_namespaces() -> None:
    """Skip unless ranks can get host names of their own (`unshare --uts`, root)."""
    if subprocess.run(["unshare", "--uts", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("no UTS namespaces here (unshare --uts needs root): every rank has this host's name")


def on_host(host: str, argv: Sequence[str]) -> list[str]:
    """`argv` run on host name `host` (its own UTS namespace)."""
    return ["unshare", "--uts", "sh", "-c", AS_HOST, host, *argv]


def mpirun(*segments: Sequence[str]) -> list[str]:
    """`mpirun -n 1 SEGMENT : -n 1 SEGMENT ...`, one rank per segment, as root too."""
    argv = ["mpirun", "--allow-run-as-root"]
    for index, segment in enumerate(segments):
        argv += [":"] * bool(index) + ["-n", "1", *segment]
    return argv


def mpi_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment with Open MPI kept to loopback and shared memory (no ssh), plus `extra`."""
    return {**os.environ, **MPI_ENV, **(extra or {})}


def run(
    argv: Sequence[str], timeout: float, extra: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `argv` (an mpirun) to its end, at most `timeout` seconds."""
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, env=mpi_env(extra), check=False
    )
