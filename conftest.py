"""Shared pytest options for every tier, which tiers run, the work groups of a parallel run, the clean-up.

The tests live in `tests/` (the product's: `tests/unit` mirrors the packages, one folder per other tier)
and `testbed/tests/` (the test bed's own). A bare `pytest` runs the fast tiers, which need nothing built:
the unit tests, the engine builder's, the test bed's unit tests and the trtllm-serve double's. The tiers
that need infrastructure built first run only when asked, as `make test` asks for all of them:
`--with-triton` (the local tritonserver), `--with-cluster` (the control plane; also the GitOps checker
and promtool, built from Go) and `--with-pods` (real nodes and the images).

`make test` runs pytest-xdist with `--dist loadgroup`: each group runs whole on one worker, so session
fixtures that cost minutes (a real-node cluster, the tritonserver repositories) start once per group's
worker, and the groups start longest first so that the run's wall time is the longest group's rather than
an accident of the order. Every session also unmounts what dead sessions left mounted (see
tests/support/leftovers.py) before it starts, and at its end deletes their directories, before pytest's
own clean-up of old ones; it also removes the shared memory dead tritonservers' Python stubs left.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.leftovers import (
    remove_dead_sessions,
    remove_unmapped_stub_memory,
    sessions_root,
    unmount_dead_sessions,
)

# `--record-times PATH`: per-tier and per-test times for docs/development/times.md (make test).
pytest_plugins = ("tests.support.timing",)

# The tiers that run only when asked, by the option that asks, and their folders.
GATED_TIERS = {
    "--with-triton": ("tests/triton",),
    "--with-cluster": (
        "tests/cluster",
        "tests/observability",
        "testbed/tests/gitops",
        "testbed/tests/cluster",
    ),
    "--with-pods": ("tests/pods", "testbed/tests/pods"),
}
_ROOT = Path(__file__).resolve().parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden files from the current output instead of comparing",
    )
    for option, folders in GATED_TIERS.items():
        parser.addoption(
            option, action="store_true", default=False, help=f"also run {', '.join(folders)} (built first)"
        )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave out the tiers nobody asked for, before their collection builds anything."""
    for option, folders in GATED_TIERS.items():
        if config.getoption(option):
            continue
        for folder in folders:
            if collection_path == _ROOT / folder or (_ROOT / folder) in collection_path.parents:
                return True
    return None


# Tiers that share one expensive session fixture across their modules run as one group; elsewhere a
# group is a module (a worker that runs any tests/cluster module starts its own control plane).
_ONE_GROUP_TIERS = frozenset({"triton", "trtllm_serve", "gitops", "engine_builder"})
# The real-pod tier runs as two groups, each on a real-node cluster of its own: run as one, it was the
# run's critical path (27 of 28 minutes) while the cores sat half idle, its tests waiting on pods. The
# halves are balanced by the modules' seconds (docs/development/times.md, "Per worker").
_FIRST_POD_HALF = frozenset(
    {
        "test_multinode.py",
        "test_autoscaling_under_load.py",
        "test_lifecycle.py",
        "test_serving.py",
        "test_leaderworkerset_controller.py",
        "test_observability.py",
    }
)
# The longest groups, longest first, from the modules' seconds of a full run (docs/development/times.md).
_LONGEST_FIRST = (
    "pods-1",
    "pods-2",
    "cluster/test_fault_loops.py",
    "triton",
    "cluster/test_operator.py",
    "cluster/test_benchmark.py",
    "cluster/test_soak.py",
)


def work_group(nodeid: str) -> str:
    """The group of the test `nodeid` (`[testbed/]tests/<tier>/<module>.py::...`): its tier or its module."""
    module = nodeid.split("::", 1)[0].removeprefix("testbed/")
    parts = module.split("/")
    tier = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    if tier == "pods":
        return "pods-1" if parts[-1] in _FIRST_POD_HALF else "pods-2"
    return tier if tier in _ONE_GROUP_TIERS else module.removeprefix("tests/")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `--dist loadgroup`, whole groups per worker by `work_group` (no marks needed)."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return work_group(nodeid)

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # On the workers (xdist sets loadgroup there): the scheduler hands out groups in collection order.
    if not getattr(config.option, "loadgroup", False):
        return

    def rank(item: pytest.Item) -> int:
        group = work_group(item.nodeid)
        return _LONGEST_FIRST.index(group) if group in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # stable: within a group and among the rest, the collection order stays


def pytest_sessionstart(session: pytest.Session) -> None:
    unmount_dead_sessions(sessions_root())
    if not hasattr(session.config, "workerinput"):
        remove_unmapped_stub_memory()


def pytest_unconfigure(config: pytest.Config) -> None:
    # pytest deletes old numbered directories after this hook, through the config's clean-up stack, but not
    # a killed session's for three days; the controller deletes those (xdist workers leave it to it).
    if hasattr(config, "workerinput"):
        unmount_dead_sessions(sessions_root())
    else:
        remove_dead_sessions(sessions_root())
