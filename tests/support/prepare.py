"""Build (or find in the caches) what the asked test tiers need, before pytest starts its workers.

    python -m tests.support.prepare [--tier cluster] [--tier pods]    (default: every tier)

`make test` and the per-tier targets run this first so that a cold build prints its progress here:
pytest-xdist workers collect in the background, where the tiers' own collection hooks (which call the
same functions, each under its cache's lock) would build silently. The cluster tier needs the control
plane, the GitOps checker and promtool; the pods tier also the real nodes' components, LeaderWorkerSet,
the metrics path and the images. Imports the local cluster's build helpers.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mmd_testbed.localcluster import images, realnodes
from mmd_testbed.localcluster.binaries import ensure_binaries
from mmd_testbed.localcluster.gitops_check import ensure_gitops_check
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.lwsbinaries import ensure_lws_binaries
from mmd_testbed.localcluster.metricsbinaries import ensure_metrics_binaries
from mmd_testbed.localcluster.nodebinaries import ensure_node_binaries

TIERS = ("cluster", "pods")


def prepare(tiers: Sequence[str]) -> int:
    """Build what `tiers` need; returns the exit code.

    For the pods tier the images are built beside the Go binaries (`images.build_beside`): they mostly
    wait on the network and the disk while the Go builds keep the cores busy.
    """
    layout = Layout.discover()
    pending_images = None
    if "pods" in tiers:
        problems = realnodes.preflight()
        if problems:
            print("the real-pod tier cannot run here: " + "; ".join(problems), file=sys.stderr)
            return 1
        pending_images = images.build_beside(layout, print)
    ensure_binaries(layout, say=print)
    ensure_gitops_check(layout, say=print)
    # promtool for tests/observability, and the metrics path the real-pod tier starts.
    ensure_metrics_binaries(layout, say=print)
    if pending_images is not None:
        ensure_node_binaries(layout, say=print)
        # The LeaderWorkerSet controller of the pods tier (tests/pods/test_leaderworkerset_controller.py).
        ensure_lws_binaries(layout, say=print)
        pending_images.result()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.prepare")
    parser.add_argument("--tier", action="append", choices=TIERS, help="a tier to prepare (default: all)")
    args = parser.parse_args(argv)
    return prepare(args.tier or TIERS)


if __name__ == "__main__":
    sys.exit(main())
