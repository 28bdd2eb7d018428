"""Shared pytest options for every tier, the work groups of a parallel run, and the clean-up of mounts.

`make test` runs pytest-xdist with `--dist loadgroup`: each group runs whole on one worker, so session
fixtures that cost minutes (the real-node cluster, the tritonserver repositories) start once per group's
worker, and the groups start longest first so that the run's wall time is the longest group's rather than
an accident of the order. Every session also unmounts what dead sessions left mounted (see
tests/support/leftovers.py), before it starts and again before pytest's own clean-up of old directories.
"""

from __future__ import annotations

import getpass
import tempfile
from pathlib import Path

import pytest

from tests.support.leftovers import unmount_dead_sessions


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden files from the current output instead of comparing",
    )


# Tiers that share one expensive session fixture across their modules run as one group; elsewhere a
# group is a module (a worker that runs any tests/cluster module starts its own control plane).
_ONE_GROUP_TIERS = frozenset({"pods", "triton", "trtllm_serve", "gitops", "engine_builder"})
# The longest groups, longest first, from the per-test durations of a full run (`--durations=0`).
_LONGEST_FIRST = (
    "pods",
    "cluster/test_fault_loops.py",
    "triton",
    "cluster/test_operator.py",
    "cluster/test_benchmark.py",
    "cluster/test_soak.py",
)
_TESTS = Path(__file__).parent


def work_group(item: pytest.Item) -> str:
    """The xdist group of `item`: its tier when the tier shares session fixtures, else its module."""
    relative = Path(str(item.path)).relative_to(_TESTS)
    tier = relative.parts[0]
    return tier if tier in _ONE_GROUP_TIERS else relative.as_posix()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        item.add_marker(pytest.mark.xdist_group(work_group(item)))

    def rank(item: pytest.Item) -> int:
        group = work_group(item)
        return _LONGEST_FIRST.index(group) if group in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # stable: within a group and among the rest, the collection order stays


def _pytest_root() -> Path:
    return Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"


def pytest_sessionstart(session: pytest.Session) -> None:
    unmount_dead_sessions(_pytest_root())


def pytest_unconfigure(config: pytest.Config) -> None:
    # pytest deletes old numbered directories after this hook, through the config's clean-up stack.
    unmount_dead_sessions(_pytest_root())
