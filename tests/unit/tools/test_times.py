"""The times page: make test's and make demo's own records, each section rewritten alone."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.timing import tier_of
from tools import times

ROOT = Path(__file__).resolve().parents[3]


def test_a_phase_keeps_its_commands_exit_code_and_seconds(tmp_path: Path) -> None:
    times.start("test", tmp_path)
    passed = times.run("test", "passes", [sys.executable, "-c", "pass"], tmp_path)
    failed = times.run("test", "fails", [sys.executable, "-c", "raise SystemExit(3)"], tmp_path)

    assert (passed, failed) == (0, 3)
    records = [json.loads(line) for line in (tmp_path / "test" / "phases.jsonl").read_text().splitlines()]
    assert [(r["phase"], r["exit"]) for r in records] == [("passes", 0), ("fails", 3)]
    assert all(r["seconds"] >= 0 for r in records)


def test_each_command_rewrites_its_own_section_and_keeps_the_other(tmp_path: Path) -> None:
    page = tmp_path / "times.md"
    for command, phase in (("test", "lint"), ("demo", "the demo")):
        times.start(command, tmp_path)
        times.run(command, phase, [sys.executable, "-c", "pass"], tmp_path)
        times.render(command, page, tmp_path)
    first = page.read_text()
    assert "## make test" in first and "| lint |" in first
    assert "## make demo" in first and "| the demo |" in first

    times.start("test", tmp_path)
    times.run("test", "pytest, every tier", [sys.executable, "-c", "pass"], tmp_path)
    times.render("test", page, tmp_path)
    second = page.read_text()
    assert "| pytest, every tier |" in second and "| lint |" not in second
    assert "| the demo |" in second


def test_the_pytest_record_becomes_a_tier_table_and_the_longest_tests(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "tests" / "unit").mkdir(parents=True)
    (project / "tests" / "unit" / "test_a.py").write_text(
        textwrap.dedent(
            """
            import time
            def test_quick(): pass
            def test_slow(): time.sleep(0.2)
            """
        )
    )
    record = tmp_path / "out" / "test" / "pytest.json"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.support.timing", "-p", "no:cacheprovider",
         "--rootdir", str(project), "--record-times", str(record), str(project / "tests")],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    data = json.loads(record.read_text())
    assert data["outcomes"] == {"passed": 2}
    assert data["tiers"]["unit"]["tests"] == 2
    assert data["longest"][0]["test"].endswith("test_slow")
    assert data["longest"][0]["seconds"] >= 0.2
    (module,) = data["modules"].values()
    assert module["worker"] == "main" and module["seconds"] >= 0.2

    times.start("test", tmp_path / "out")  # forgets the record: write it again
    record.write_text(json.dumps(data))
    text = times.section("test", tmp_path / "out")
    assert "| unit | 2 |" in text
    assert "test_slow` |" in text
    assert "| main | 0 s |" in text


def test_under_xdist_each_module_names_the_worker_that_ran_it(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "tests" / "unit").mkdir(parents=True)
    for name in ("a", "b"):
        (project / "tests" / "unit" / f"test_{name}.py").write_text("def test_one(): pass\n")
    record = tmp_path / "pytest.json"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-p", "tests.support.timing",
         "-p", "no:cacheprovider", "--rootdir", str(project), "--record-times", str(record),
         str(project / "tests")],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    modules = json.loads(record.read_text())["modules"]
    assert sorted(modules) == ["tests/unit/test_a.py", "tests/unit/test_b.py"]
    assert {module["worker"] for module in modules.values()} <= {"gw0", "gw1"}


def test_a_test_belongs_to_the_tier_of_its_folder() -> None:
    assert tier_of("tests/cluster/test_install.py::test_x") == "cluster"
    assert tier_of("testbed/tests/gitops/test_checker.py::test_x") == "gitops"
    assert tier_of("testbed/tests/test_mpi_world.py::test_x") == "testbed"
