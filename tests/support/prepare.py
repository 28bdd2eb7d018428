"""Build (or find in the caches) what the asked test tiers need, before pytest starts its workers.

    python -m tests.support.prepare [--tier cluster] [--tier pods]    (default: every tier)

`make test` and the per-tier targets run this first so that a cold build prints its progress here:
pytest-xdist workers collect in the background, where the tiers' own collection hooks (which call the
same functions, each under its cache's lock) would build silently. The cluster tier needs the control
plane, the GitOps checker and promtool; the pods tier also the real nodes' components (and their fake GPU
device plugin), LeaderWorkerSet, the metrics path and the images. Imports the local cluster's build
helpers.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mmd_testbed.localcluster import builds, realnodes
from mmd_testbed.localcluster.layout import Layout

TIERS = ("cluster", "pods")


def prepare(tiers: Sequence[str]) -> int:
    """Build what `tiers` need; returns the exit code.

    The cluster tier needs the control plane, the GitOps checker and promtool (the metrics cache); the pods
    tier also the nodes' components, LeaderWorkerSet and the images. `builds.ensure_all` builds two Go
    caches at a time and the images beside them.
    """
    caches = ["control plane", "GitOps checker", "metrics"]
    if "pods" in tiers:
        problems = realnodes.preflight()
        if problems:
            print("the real-pod tier cannot run here: " + "; ".join(problems), file=sys.stderr)
            return 1
        caches += ["nodes", "fake GPU plugin", "LeaderWorkerSet"]
    builds.ensure_all(Layout.discover(), print, caches, with_images="pods" in tiers)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.prepare")
    parser.add_argument("--tier", action="append", choices=TIERS, help="a tier to prepare (default: all)")
    args = parser.parse_args(argv)
    return prepare(args.tier or TIERS)


if __name__ == "__main__":
    sys.exit(main())
