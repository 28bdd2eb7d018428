"""`trtllm-llmapi-launch COMMAND [ARGS...]`: TensorRT-LLM's launcher of a multi-node LLM API world, doubled.

The real one (a bash script of TensorRT-LLM's image) reads the process's MPI rank (Slurm's, Open MPI's or
PMI's variable; 0 outside MPI): rank 0 runs COMMAND (the operator's `trtllm-serve ...`, whose LLM API then
drives the other ranks), every other rank runs the LLM API's MPI worker (`python3 -m
tensorrt_llm.llmapi.mgmn_worker_node`). This one keeps that contract: rank 0 execs COMMAND, every other rank
execs the double's worker (`mmd_testbed.trtllm_serve.worker`), each with this process's environment. The
CPU stand-in image puts it on PATH as `trtllm-llmapi-launch`. Imports the standard library.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence

# Where the real script looks for the rank, in its order.
RANK_VARIABLES = ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMI_ID")
WORKER_MODULE = "mmd_testbed.trtllm_serve.worker"
EXIT_USAGE = 2


def mpi_rank(environ: Mapping[str, str]) -> int:
    """The rank the launcher set (the first of `RANK_VARIABLES` that is set), 0 outside MPI."""
    return next((int(environ[name]) for name in RANK_VARIABLES if environ.get(name)), 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Exec COMMAND on rank 0, the LLM API worker elsewhere; 2 without a COMMAND on rank 0."""
    command = list(sys.argv[1:] if argv is None else argv)
    rank = mpi_rank(os.environ)
    print(f"mpi_rank: {rank}", file=sys.stderr, flush=True)
    if rank == 0:
        if not command:
            print("usage: trtllm-llmapi-launch COMMAND [ARGS...]", file=sys.stderr)
            return EXIT_USAGE
        print(f"{rank} run {shlex.join(command)} ...", file=sys.stderr, flush=True)
        os.execvp(command[0], command)
    print(f"{rank} launch worker ...", file=sys.stderr, flush=True)
    os.execv(sys.executable, [sys.executable, "-m", WORKER_MODULE])


if __name__ == "__main__":
    sys.exit(main())
