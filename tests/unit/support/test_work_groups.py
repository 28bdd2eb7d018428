"""The work groups of `make test`'s parallel run (the root conftest.py)."""

from __future__ import annotations

from pathlib import Path

import conftest

ROOT = Path(conftest.__file__).parent


def test_the_real_pod_tier_splits_in_two_halves_by_module() -> None:
    modules = sorted(ROOT.glob("tests/pods/test_*.py")) + sorted(ROOT.glob("testbed/tests/pods/test_*.py"))
    groups = {conftest.work_group(f"{path.relative_to(ROOT)}::test_x") for path in modules}
    assert groups == {"pods-1", "pods-2"}
    # A renamed module would silently change halves: every name in the first half is a module.
    assert {path.name for path in modules} >= conftest._FIRST_POD_HALF


def test_shared_fixture_tiers_are_one_group_and_other_modules_their_own() -> None:
    assert conftest.work_group("tests/triton/test_ensemble.py::test_x") == "triton"
    assert conftest.work_group("testbed/tests/trtllm_serve/test_cli.py::test_x") == "trtllm_serve"
    assert conftest.work_group("tests/cluster/test_soak.py::test_x") == "cluster/test_soak.py"
    assert set(conftest._LONGEST_FIRST[:2]) == {"pods-1", "pods-2"}
