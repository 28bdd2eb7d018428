"""`python -m mmd_testbed.trtllm_serve.worker`: the LLM API's MPI worker of every rank but 0, doubled.

`trtllm-llmapi-launch` runs TensorRT-LLM's `tensorrt_llm.llmapi.mgmn_worker_node` on the ranks other than 0:
it joins `MPI.COMM_WORLD` and serves rank 0's tasks (an MPICommExecutor) until rank 0 shuts the executor
down. This double joins the world the same way (the Triton doubles' `world.join`, bounded: a world that does
not form exits 1 saying how many ranks joined of how many), says so, and waits idle until rank 0 ends the
world (`world.wait_for_farewell`), or until mpirun ends it. Imports the standard library and `world`.
"""

from __future__ import annotations

import sys

from mmd_testbed.triton.doubles import world

EXIT_FAILED = 1


def main() -> int:
    """Join, wait for rank 0's farewell, end (exit 1, without finalising, when the world did not form)."""
    joined = world.join_or_exit("RuntimeError")
    print(
        f"[trtllm-serve double] worker rank {joined.rank} joined the MPI world: {joined.summary()}",
        file=sys.stderr,
        flush=True,
    )
    ended = world.wait_for_farewell(joined)
    print(f"[trtllm-serve double] worker rank {joined.rank} quit", file=sys.stderr, flush=True)
    return 0 if ended else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
