"""The chart's alerting rules (charts/mmd-operator/files/alerts.yaml) as a reader meets them: each alert with
a severity, a summary naming what it is about, a description, and a runbook section in docs/alerts.md that
exists; each unit-tested firing and not firing (tests/observability/alerts_test.yaml, which promtool runs in
tests/observability)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES: list[dict[str, Any]] = [
    rule
    for group in yaml.safe_load((ROOT / "charts/mmd-operator/files/alerts.yaml").read_text())["groups"]
    for rule in group["rules"]
]
RUNBOOK = "https://github.com/mmd-operator/mmd-operator/blob/main/docs/alerts.md#"
DOC = (ROOT / "docs" / "alerts.md").read_text()
UNIT_TESTS = yaml.safe_load((ROOT / "tests" / "observability" / "alerts_test.yaml").read_text())


def _anchors(markdown: str) -> set[str]:
    headings = re.findall(r"^#{2,3} (.+)$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_every_alert_has_a_severity_a_summary_a_description_and_a_runbook_section() -> None:
    anchors = _anchors(DOC)
    for rule in RULES:
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}, name
        assert annotations["runbook_url"] == f"{RUNBOOK}{name.lower()}", name
        assert name.lower() in anchors, f"docs/alerts.md has no section {name}"
        # An alert about one resource names it.
        if re.search(r"by \(namespace, name\b", rule["expr"]):
            assert "{{ $labels.namespace }}/{{ $labels.name }}" in annotations["summary"], name


def test_every_alert_in_the_runbook_is_a_rule() -> None:
    documented = set(re.findall(r"^## (MMD\w+)$", DOC, flags=re.MULTILINE))
    assert documented == {rule["alert"] for rule in RULES}


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    assert UNIT_TESTS["rule_files"] == ["../../charts/mmd-operator/files/alerts.yaml"]
    checks = [check for case in UNIT_TESTS["tests"] for check in case["alert_rule_test"]]
    for name in {rule["alert"] for rule in RULES}:
        outcomes = [bool(check["exp_alerts"]) for check in checks if check["alertname"] == name]
        assert True in outcomes and False in outcomes, f"{name}: tested firing {outcomes}"
    # Both kinds of failed artifact fire somewhere.
    artifacts = {
        alert["exp_labels"].get("artifact")
        for check in checks
        if check["alertname"] == "MMDArtifactFailed"
        for alert in check["exp_alerts"]
    }
    assert artifacts == {"engine", "weights"}
