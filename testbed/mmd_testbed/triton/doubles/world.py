"""The MPI world a TensorRT-LLM rank joins as it loads: the doubles' proof that a world forms, across pods.

A real rank joins `MPI.COMM_WORLD` as it loads: the TensorRT-LLM backend in every tritonserver rank (leader
mode), the LLM API's MPI session under `trtllm-llmapi-launch` (trtllm-serve). The doubles do the same with
mpi4py when Open MPI started them in a world of more than one rank (`OMPI_COMM_WORLD_SIZE`): `join`
initialises MPI and gathers every rank's host name, so rank 0 knows how many ranks it reached on how many
hosts (`World.summary`).

Every wait is bounded (`WORLD_SECONDS`, or MMD_DOUBLE_WORLD_SECONDS, or the caller's), and a world that
does not form raises `WorldError` naming how many ranks joined of how many. MPI_Init returns only once every
rank of the world has called it, and mpi4py calls it holding the GIL (no thread could give up on it), so
`join` calls MPI_Init_thread through ctypes in a thread (ctypes releases the GIL) and hands the initialised
library to mpi4py. The host names then travel as point-to-point messages polled against the deadline: an
allgather whose waits can give up (and name the missing ranks), and which costs no CPU while it waits,
unlike Open MPI's busy polling.

Finalising is a collective too, so nothing finalises at exit: the Triton doubles never do (ranks other than
0 never return from loading; mpirun ends them), the trtllm-serve double's rank 0 says goodbye to its workers
(`farewell`), which wait for it (`wait_for_farewell`), and then both finalise, bounded.

`python -m mmd_testbed.triton.doubles.world [--seconds S] [--farewell]` joins and prints the world as JSON
(the tests run it under mpirun). Runs inside tritonserver's Python backend stub (as part of `triton_doubles`)
and in the trtllm-serve double; imports the standard library, and mpi4py once a world has more than one rank.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# How long a rank waits for its world to form (every rank loads at once; a rank that never starts is lost).
WORLD_SECONDS = 120.0
# Overrides WORLD_SECONDS where the caller gives no bound (tests of a world that never forms).
SECONDS_ENV = "MMD_DOUBLE_WORLD_SECONDS"
FAREWELL_SECONDS = 5.0
_POLL_SECONDS = 0.05
_IDLE_POLL_SECONDS = 0.5
# Message tags of the exchange (any values no other traffic of these processes uses).
_JOIN_TAG, _WORLD_TAG, _FAREWELL_TAG = 7101, 7102, 7103
# MPI_THREAD_MULTIPLE in Open MPI's and MPICH's mpi.h alike: mpi4py then calls MPI from any thread.
_THREAD_MULTIPLE = 3
# Open MPI 4 and 5 (libmpi.so.40), MPICH (libmpi.so.12).
_LIBMPI = ("libmpi.so.40", "libmpi.so.12")
# Shared memory without cross-memory attach: a pod without CAP_SYS_PTRACE cannot use it.
_OPEN_MPI_DEFAULTS = {"OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


class WorldError(Exception):
    """The MPI world did not form in time; the message says how many ranks joined of how many."""


@dataclass(frozen=True)
class World:
    """The world as one rank sees it once formed: its rank and every rank's host name, in rank order."""

    rank: int
    hosts: tuple[str, ...]

    @property
    def size(self) -> int:
        """How many ranks."""
        return len(self.hosts)

    @property
    def distinct_hosts(self) -> tuple[str, ...]:
        """The hosts, each once, in the order of their first rank."""
        return tuple(dict.fromkeys(self.hosts))

    @property
    def spans_hosts(self) -> bool:
        """Whether the ranks run on more than one host (pods of a group, machines)."""
        return len(self.distinct_hosts) > 1

    def summary(self) -> str:
        """`16 ranks on 2 hosts: a b` (no comma: it rides in the LLM double's digest)."""
        hosts = self.distinct_hosts
        ranks = "rank" if self.size == 1 else "ranks"
        return f"{self.size} {ranks} on {len(hosts)} host{'' if len(hosts) == 1 else 's'}: {' '.join(hosts)}"


def world_size(environ: Mapping[str, str] = os.environ) -> int:
    """The MPI world's size as the launcher set it (Open MPI, else PMI), 1 outside MPI."""
    return int(environ.get("OMPI_COMM_WORLD_SIZE") or environ.get("PMI_SIZE") or 1)


def world_rank(environ: Mapping[str, str] = os.environ) -> int:
    """This process's rank as the launcher set it (Open MPI, else PMI), 0 outside MPI."""
    return int(environ.get("OMPI_COMM_WORLD_RANK") or environ.get("PMI_RANK") or 0)


def _libmpi() -> ctypes.CDLL:
    found = ctypes.util.find_library("mpi")
    for name in (*_LIBMPI, *([found] if found else [])):
        try:
            return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
    raise WorldError(f"no MPI library ({', '.join(_LIBMPI)}) to join the world with")


def _bounded(call: Callable[[], int], seconds: float) -> int | None:
    """`call()`'s result, or None when it has not returned within `seconds` (it keeps running)."""
    box: list[int] = []
    thread = threading.Thread(target=lambda: box.append(call()), name="mpi-call", daemon=True)
    thread.start()
    thread.join(max(seconds, 0.0))
    return box[0] if box else None


def _joined_at_most(rank: int, size: int) -> str:
    if size == 2:
        return f"1 of 2 ranks joined (rank {rank}, this one)"
    return f"at most {size - 1} of {size} ranks joined (rank {rank}, this one, did; MPI names no others)"


def _comm() -> Any:
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _poll(requests: Mapping[int, Any], deadline: float) -> dict[int, Any]:
    """Test `requests` (by rank) until all complete or the deadline passes: the completed ones' results."""
    pending, done = dict(requests), {}
    while pending:
        for peer, request in list(pending.items()):
            completed, value = request.test()
            if completed:
                done[peer] = value
                del pending[peer]
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(_POLL_SECONDS)
    return done


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _exchange(comm: Any, rank: int, size: int, seconds: float, deadline: float) -> tuple[str, ...]:
    host = socket.gethostname()
    late = f"the MPI world of {size} ranks did not form within {seconds:g} s"
    if rank == 0:
        arrived = _poll({peer: comm.irecv(source=peer, tag=_JOIN_TAG) for peer in range(1, size)}, deadline)
        missing = [peer for peer in range(1, size) if peer not in arrived]
        if missing:
            raise WorldError(
                f"{late}: {size - len(missing)} of {size} ranks joined ({_ranks(missing)} did not answer "
                "rank 0)"
            )
        hosts = (host, *(str(arrived[peer]) for peer in range(1, size)))
        sent = _poll(
            {peer: comm.isend(hosts, dest=peer, tag=_WORLD_TAG) for peer in range(1, size)}, deadline
        )
        if len(sent) != size - 1:
            raise WorldError(f"{late}: rank 0 could not tell every rank the world")
        return hosts
    answered = _poll(
        {0: comm.irecv(source=0, tag=_WORLD_TAG), -1: comm.isend(host, dest=0, tag=_JOIN_TAG)}, deadline
    )
    if 0 not in answered:
        raise WorldError(f"{late}: rank {rank} joined, but rank 0 did not answer it")
    return tuple(str(name) for name in answered[0])


def join(seconds: float | None = None, environ: Mapping[str, str] = os.environ) -> World:
    """Join the MPI world this process was started in and gather every rank's host name, within `seconds`.

    Outside MPI, or in a world of one rank, the world is this process alone (MPI is not touched). Without
    `seconds`, MMD_DOUBLE_WORLD_SECONDS or else `WORLD_SECONDS` bound the wait.

    Raises:
        WorldError: the world did not form in time (how many ranks joined of how many), or MPI failed.
    """
    size, rank = world_size(environ), world_rank(environ)
    if size <= 1:
        return World(rank=0, hosts=(socket.gethostname(),))
    if seconds is None:
        seconds = float(environ.get(SECONDS_ENV) or WORLD_SECONDS)
    deadline = time.monotonic() + seconds
    for name, value in _OPEN_MPI_DEFAULTS.items():
        os.environ.setdefault(name, value)
    library = _libmpi()
    provided = ctypes.c_int()
    code = _bounded(
        lambda: int(library.MPI_Init_thread(None, None, _THREAD_MULTIPLE, ctypes.byref(provided))), seconds
    )
    if code is None:
        raise WorldError(
            f"the MPI world of {size} ranks did not form within {seconds:g} s: "
            f"{_joined_at_most(rank, size)}; MPI_Init returns once every rank has called it"
        )
    if code != 0:
        raise WorldError(f"rank {rank}: MPI_Init_thread failed with MPI error {code}")
    import mpi4py

    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
    comm = _comm()
    if comm.Get_size() != size or comm.Get_rank() != rank:
        raise WorldError(
            f"MPI says rank {comm.Get_rank()} of {comm.Get_size()}, the launcher rank {rank} of {size}"
        )
    return World(rank=rank, hosts=_exchange(comm, rank, size, seconds, deadline))


def join_or_exit(error_name: str, seconds: float | None = None) -> World:
    """`join`, or say `<error_name>: <why>` on stderr and exit 1 at once when the world did not form.

    At once (`os._exit`): a thread may still sit in MPI_Init, so no interpreter shutdown and no atexit.
    """
    try:
        return join(seconds)
    except WorldError as error:
        print(f"{error_name}: {error}", file=sys.stderr, flush=True)
        os._exit(1)


def _finalize(seconds: float) -> bool:
    return _bounded(lambda: int(_libmpi().MPI_Finalize()), seconds) == 0


def farewell(world: World, seconds: float = FAREWELL_SECONDS) -> bool:
    """Rank 0: tell the other ranks the world ends, then finalise; whether all of it ended in `seconds`."""
    if world.size <= 1:
        return True
    deadline = time.monotonic() + seconds
    comm = _comm()
    told = _poll(
        {peer: comm.isend(None, dest=peer, tag=_FAREWELL_TAG) for peer in range(1, world.size)}, deadline
    )
    return len(told) == world.size - 1 and _finalize(deadline - time.monotonic())


def wait_for_farewell(world: World, seconds: float = FAREWELL_SECONDS) -> bool:
    """A rank other than 0: wait, idle, until rank 0 ends the world, then finalise (within `seconds`)."""
    if world.size <= 1:
        return True
    goodbye = _comm().irecv(source=0, tag=_FAREWELL_TAG)
    while not goodbye.test()[0]:
        time.sleep(_IDLE_POLL_SECONDS)
    return _finalize(seconds)


def main(argv: Sequence[str] | None = None) -> int:
    """Join, print `{"rank", "size", "hosts", "summary"}`; with --farewell, end the world in order."""
    parser = argparse.ArgumentParser(prog="python -m mmd_testbed.triton.doubles.world")
    parser.add_argument(
        "--seconds", type=float, help=f"how long to wait for the world (default {WORLD_SECONDS:g})"
    )
    parser.add_argument(
        "--farewell", action="store_true", help="rank 0 ends the world; the others wait for it"
    )
    args = parser.parse_args(argv)
    world = join_or_exit("WorldError", args.seconds)
    print(
        json.dumps(
            {"rank": world.rank, "size": world.size, "hosts": world.hosts, "summary": world.summary()}
        ),
        flush=True,
    )
    if args.farewell:
        ended = farewell(world) if world.rank == 0 else wait_for_farewell(world)
        if not ended:
            print(f"rank {world.rank}: the world did not end in order", file=sys.stderr, flush=True)
            os._exit(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
