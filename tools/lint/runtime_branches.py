"""Count the places that ask which runtime a resource has, outside the one dispatch (`make lint`).

A runtime is a plan type: after `plan.resource_plan` picks the planner, every layer looks its part up by
`plan.runtime` in one small table. This walks the syntax of the shipped packages (the operator, the
builder, mmctl) and counts every test of an `if`, a conditional expression, an `assert`, a `while` or a
comprehension's condition that names a runtime (`Runtime`, `.runtime`, `serving_runtime`, a runtime's
name), a plan type, or a `serve` flag. Dictionaries keyed by `Runtime` (the tables) are not tests.

    python -m tools.lint.runtime_branches [--max N] [--list]

Exits 1 when more than N (default: `LIMIT`) are found. Maintainer tooling; imports the standard library.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("operator/mmd_operator", "engine_builder/engine_builder", "cli/mmctl")
# The one dispatch: the planner table and the plan types themselves.
EXEMPT = frozenset({"operator/mmd_operator/plan/resource_plan.py"})
LIMIT = 6
PLAN_TYPES = frozenset({"TritonPlan", "TrtllmServePlan", "ResourcePlan", "ServePlan", "AnyPlan"})
RUNTIME_WORDS = frozenset(
    {"Runtime", "runtime", "serving_runtime", "serve", "TRTLLM_SERVE", "TRITON_TRTLLM_ENGINE"}
)
RUNTIME_NAMES = frozenset({"trtllm-serve", "triton-trtllm-engine"})


def _names_a_runtime(test: ast.AST) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Name) and (node.id in PLAN_TYPES or node.id in RUNTIME_WORDS):
            return True
        if isinstance(node, ast.Attribute) and (node.attr in PLAN_TYPES or node.attr in RUNTIME_WORDS):
            return True
        if isinstance(node, ast.Constant) and node.value in RUNTIME_NAMES:
            return True
    return False


def branch_tests(tree: ast.AST) -> Iterator[ast.AST]:
    """Every branch test in `tree`: of an `if`, a conditional, a `while`, an `assert`, a comprehension."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.IfExp | ast.While | ast.Assert):
            yield node.test
        elif isinstance(node, ast.comprehension):
            yield from node.ifs


def tests_naming(
    root: Path, names_it: Callable[[ast.AST], bool], exempt: frozenset[str]
) -> list[tuple[str, int]]:
    """Every (file, line) of the shipped packages whose branch test `names_it`, outside the `exempt` files."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative in exempt:
                continue
            tree = ast.parse(path.read_text(), relative)
            found += sorted((relative, test.lineno) for test in branch_tests(tree) if names_it(test))
    return found


def branches(root: Path = REPO_ROOT) -> list[tuple[str, int]]:
    """Every (file, line) whose test names a runtime, outside the exempt dispatch."""
    return tests_naming(root, _names_a_runtime, EXEMPT)


def count(
    what: str, find: Callable[[Path], list[tuple[str, int]]], limit: int, argv: Sequence[str] | None
) -> int:
    """The command line of a branch count: print it (and with --list each place); exit 1 above --max."""
    parser = argparse.ArgumentParser(prog=f"python -m tools.lint.{what}_branches")
    parser.add_argument("--max", type=int, default=limit)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--root", type=Path, default=REPO_ROOT)
    args = parser.parse_args(argv)
    found = find(args.root)
    files = {path for path, _ in found}
    if args.list:
        for path, line in found:
            print(f"{path}:{line}")
    print(f"{len(found)} {what} branches in {len(files)} files (at most {args.max})")
    return 0 if len(found) <= args.max else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Print the count (and with --list each place); exit 1 above --max."""
    return count("runtime", branches, LIMIT, argv)


if __name__ == "__main__":
    sys.exit(main())
