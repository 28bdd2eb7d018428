"""docs/configuration.md is generated from the settings, the chart's values and its deployment template.

A setting added without `make generate`, a chart value renamed in the template, or a chart default that
starts the operator with other settings than its own defaults fails here.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from mmd_operator.config import OperatorConfig
from tools import chart, configuration_doc

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = (ROOT / configuration_doc.DEPLOYMENT_TEMPLATE).read_text()


def test_committed_configuration_doc_does_not_drift() -> None:
    committed = (ROOT / configuration_doc.CONFIGURATION_DOC).read_text()
    assert committed == configuration_doc.configuration_doc(TEMPLATE), (
        f"{configuration_doc.CONFIGURATION_DOC} is stale; run `make generate`"
    )


def test_every_setting_has_a_row() -> None:
    doc = configuration_doc.configuration_doc(TEMPLATE)
    rows = re.findall(r"^\| `(MMD_[A-Z_]+)` \|", doc, flags=re.MULTILINE)
    assert rows == [f"MMD_{spec.name.upper()}" for spec in fields(OperatorConfig)]


def test_every_variable_the_template_sets_is_read() -> None:
    # A variable set some other way than from a value or the pod's own fields (a literal, a Secret)
    # would escape the doc.
    from_pod = configuration_doc.pod_field_settings(TEMPLATE)
    assert from_pod == {"pod_name": "metadata.name"}
    assert len(configuration_doc.chart_settings(TEMPLATE)) + len(from_pod) == TEMPLATE.count("- name: MMD_")


def test_the_chart_defaults_start_the_operator_with_its_own_defaults() -> None:
    values = chart.Values().model_dump(by_alias=True)
    env = {}
    for setting, key in configuration_doc.chart_settings(TEMPLATE).items():
        value = values
        for part in key.split("."):
            value = value[part]
        # As the template renders it: `join ","` for a list, `quote` for the rest.
        env[f"MMD_{setting.upper()}"] = ",".join(value) if isinstance(value, list) else str(value)
    # One deliberate difference: the chart elects a leader, so that it may run several replicas; the
    # operator run from a checkout (`python -m mmd_operator`) runs alone unless told.
    assert OperatorConfig.from_env(env) == OperatorConfig(leader_election=True)


def test_a_chart_default_unlike_the_settings_is_shown_beside_it() -> None:
    rows = {
        row.split(" | ")[0].strip("| `"): row.split(" | ")[4]
        for row in configuration_doc.configuration_doc(TEMPLATE).splitlines()
        if row.startswith("| `MMD_")
    }
    # The chart elects a leader by default; the operator run alone does not.
    assert rows["MMD_LEADER_ELECTION"] == "`false`; the chart: `true`"
    # The chart leaves the Lease's name empty: the release's full name.
    assert rows["MMD_LEASE_NAME"] == "`mmd-operator`; the chart: empty"
    assert rows["MMD_WORKERS"] == "`8`"
    assert [name for name, default in rows.items() if "the chart" in default] == [
        "MMD_LEADER_ELECTION",
        "MMD_LEASE_NAME",
    ]


def test_a_variable_that_is_no_setting_is_refused() -> None:
    template = (
        TEMPLATE
        + "            - name: MMD_NO_SUCH_SETTING\n              value: {{ .Values.workers | quote }}\n"
    )
    with pytest.raises(ValueError, match="MMD_NO_SUCH_SETTING"):
        configuration_doc.configuration_doc(template)


def test_a_value_the_chart_does_not_have_is_refused() -> None:
    template = TEMPLATE.replace(".Values.workers", ".Values.workerCount")
    with pytest.raises(ValueError, match="workerCount"):
        configuration_doc.configuration_doc(template)
