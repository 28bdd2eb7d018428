"""The chart's alerting rules (`charts/mmd-operator/files/alerts.yaml`) under the real promtool: well-formed,
every alert's unit tests (`alerts_test.yaml`) passing, and those tests able to tell a broken rule: without
an alert's window (`for`), or without an event alert's branch for a counter that appears already counted,
they fail."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "mmd-operator" / "files" / "alerts.yaml"
UNIT_TESTS = Path(__file__).with_name("alerts_test.yaml")


def _rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def _promtool(promtool: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_promtool_finds_every_rule_well_formed(promtool: Path) -> None:
    checked = _promtool(promtool, "check", "rules", "--lint=all", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in checked.stdout


def test_every_alert_passes_its_unit_tests(promtool: Path) -> None:
    tested = _promtool(promtool, "test", "rules", str(UNIT_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def _without(index: int, change: str) -> dict[str, Any]:
    """The rules file with one change to the rule at `index`."""
    document: dict[str, Any] = yaml.safe_load(RULES.read_text())
    rule = [rule for group in document["groups"] for rule in group["rules"]][index]
    if change == "window":
        del rule["for"]
    else:  # the branch of `... > 0 or ... unless ... offset ...`: only the increase is left
        rule["expr"] = rule["expr"].split("\nor\n")[0]
    return document


MUTATIONS = [
    pytest.param(
        index, change, id="-".join(filter(None, (rule["alert"], rule["labels"].get("artifact"), change)))
    )
    for index, rule in enumerate(_rules())
    for change in ("window", "new-series")
    if (change == "window" and "for" in rule) or (change == "new-series" and "offset" in rule["expr"])
]


@pytest.mark.parametrize(("index", "change"), MUTATIONS)
def test_the_unit_tests_fail_for_a_rule_without_its_window_or_its_new_series_branch(
    promtool: Path, tmp_path: Path, index: int, change: str
) -> None:
    rules = tmp_path / "alerts.yaml"
    rules.write_text(yaml.safe_dump(_without(index, change), sort_keys=False))
    unit_tests = yaml.safe_load(UNIT_TESTS.read_text())
    unit_tests["rule_files"] = [str(rules)]
    (tmp_path / "alerts_test.yaml").write_text(yaml.safe_dump(unit_tests, sort_keys=False))
    tested = _promtool(promtool, "test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert tested.returncode != 0, f"the unit tests do not notice {change} removed:\n{tested.stdout}"
    assert "FAILED" in tested.stdout + tested.stderr
