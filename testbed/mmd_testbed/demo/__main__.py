"""`make demo`: the operator's main job, end to end, on the local cluster.

By default on real nodes (`real_nodes`): real containers for the operator, its build pods and its serving
pods, ending with an answer from a serving pod through its Service. Where this machine cannot run real
nodes (the reason is printed), or with `--kwok`, on kwok's simulated GPU nodes (`kwok`).
"""

from __future__ import annotations

import argparse
import sys
import time

from mmd_testbed.demo.common import ROOT, STARTED, say
from mmd_testbed.demo.kwok import kwok_demo
from mmd_testbed.demo.real_nodes import real_demo
from mmd_testbed.localcluster import realnodes
from mmd_testbed.localcluster.layout import default_state_dir


def main(argv: list[str] | None = None) -> int:
    """Run the demo on real nodes where this machine can run them, else on kwok's; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--keep-cluster", action="store_true", help="leave the control plane running at the end"
    )
    parser.add_argument("--kwok", action="store_true", help="the demo on kwok's simulated nodes only")
    args = parser.parse_args(argv)
    problems = [] if args.kwok else realnodes.preflight(default_state_dir(ROOT))
    if not args.kwok and not problems:
        code = real_demo(args.keep_cluster)
        say(f"Demo done in {time.monotonic() - STARTED:.0f} s.")
        return code
    if problems:
        say("Real nodes cannot run on this machine, so this demo runs on kwok's simulated nodes:")
        for problem in problems:
            say(f"  {problem}")
    return kwok_demo(args)


if __name__ == "__main__":
    sys.exit(main())
