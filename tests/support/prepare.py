"""Build (or find in the caches) what the asked test tiers need, before pytest starts its workers.

    python -m tests.support.prepare [--tier cluster] [--tier pods]    (default: every tier)

`make test` and the per-tier targets run this first so that a cold build prints its progress here:
pytest-xdist workers collect in the background, where the tiers' own collection hooks (which call the
same functions, each under its cache's lock) would build silently. The cluster tier needs the control
plane, the GitOps checker and promtool; the pods tier also the real nodes' components (and their fake GPU
device plugin), LeaderWorkerSet, the metrics path and the images, and about `POD_TIER_DISK` free on the
temporary directory's file system, counted after earlier runs' directories are removed: with less, it
stops here and says so, before a run that would end in every test's errors. Imports the local cluster's
build helpers and the leftovers' clean-up.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from mmd_testbed.localcluster import builds, realnodes
from mmd_testbed.localcluster.layout import Layout
from tests.support.leftovers import remove_dead_sessions, sessions_root

TIERS = ("cluster", "pods")
# What the real-pod tier takes on the disk at its peak, measured (docs/development/local-cluster.md#disk):
# each real node's containerd holds every image unpacked, about 1.3 GB, and `make test` runs four nodes.
POD_TIER_DISK = 9 * 10**9


def prepare(tiers: Sequence[str]) -> int:
    """Build what `tiers` need; returns the exit code.

    The cluster tier needs the control plane, the GitOps checker and promtool (the metrics cache); the pods
    tier also the nodes' components, LeaderWorkerSet and the images. `builds.ensure_all` builds two Go
    caches at a time and the images beside them.
    """
    caches = ["control plane", "GitOps checker", "metrics"]
    # Earlier runs' directories first (a failed run keeps its real nodes' stores), so that they count as free.
    removed = remove_dead_sessions(sessions_root())
    if removed:
        print(f"removed the temporary directories of {len(removed)} earlier test session(s)")
    if "pods" in tiers:
        problems = realnodes.preflight() + _disk_problems(Path(tempfile.gettempdir()), POD_TIER_DISK)
        if problems:
            print("the real-pod tier cannot run here: " + "; ".join(problems), file=sys.stderr)
            return 1
        caches += ["nodes", "fake GPU plugin", "LeaderWorkerSet"]
    builds.ensure_all(Layout.discover(), print, caches, with_images="pods" in tiers)
    return 0


def _disk_problems(directory: Path, needed: int) -> list[str]:
    free = shutil.disk_usage(directory).free
    if free >= needed:
        return []
    return [
        f"{free / 1e9:.1f} GB free on the file system of {directory}, where the real nodes keep their images "
        f"and etcd its data; the tier needs about {needed / 1e9:.0f} GB"
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.prepare")
    parser.add_argument("--tier", action="append", choices=TIERS, help="a tier to prepare (default: all)")
    args = parser.parse_args(argv)
    return prepare(args.tier or TIERS)


if __name__ == "__main__":
    sys.exit(main())
