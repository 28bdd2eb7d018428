"""Count the places that ask which shape a replica has, outside the one decision (`make lint`).

A replica is one pod or a group of pods (`ReplicaShape`): `Parallelism.shape` decides it once, and every
layer that differs by shape looks its part up by the shape in one small table (or by the serving
workload's kind, in the same table's rows). This counts, as `runtime_branches` does for the runtime, every
branch test of the shipped packages that names the shape: `ReplicaShape`, a `.shape`, `spans_pods`,
`pods_per_replica`, or the group's workload kind (`LEADER_WORKER_SET`). Tables keyed by the shape are
not tests.

    python -m tools.lint.shape_branches [--max N] [--list]

Exits 1 when more than N (default: `LIMIT`) are found. Maintainer tooling; imports the standard library
and `runtime_branches`.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.lint.runtime_branches import REPO_ROOT, count, tests_naming

# The one decision: the shape of a replica, from its world and its GPUs per pod.
EXEMPT = frozenset({"operator/mmd_operator/api/v1alpha1/parallelism.py"})
LIMIT = 2
# Named as a variable or an attribute.
SHAPE_WORDS = frozenset(
    {"ReplicaShape", "spans_pods", "pods_per_replica", "LEADER_WORKER_SET", "LEADER_WORKER_SETS"}
)
# Named as an attribute only (`parallelism.shape`): a local `shape` is as often a tensor's or a checkpoint's.
SHAPE_ATTRIBUTES = SHAPE_WORDS | {"shape"}


def _names_a_shape(test: ast.AST) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Name) and node.id in SHAPE_WORDS:
            return True
        if isinstance(node, ast.Attribute) and node.attr in SHAPE_ATTRIBUTES:
            return True
    return False


def branches(root: Path = REPO_ROOT) -> list[tuple[str, int]]:
    """Every (file, line) whose test names a replica's shape, outside the decision."""
    return tests_naming(root, _names_a_shape, EXEMPT)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the count (and with --list each place); exit 1 above --max."""
    return count("shape", branches, LIMIT, argv)


if __name__ == "__main__":
    sys.exit(main())
