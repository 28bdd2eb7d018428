"""The chart's Grafana dashboard (tools/dashboard.py, committed as charts/mmd-operator/dashboards/): a
dashboard Grafana can load, each panel with a query, each serving query from the one table of the serving
pods' series, narrowed to the resource the variables pick, and each runtime without a series said so."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mmd_operator.knowledge import Runtime
from mmd_operator.scaling_metrics import ANALYSIS_SERIES, SCALING_METRICS, ScalingMetric
from tools import dashboard

ROOT = Path(__file__).resolve().parents[3]
COMMITTED: dict[str, Any] = json.loads((ROOT / dashboard.DASHBOARD_FILE).read_text())
PANELS = [panel for panel in COMMITTED["panels"] if panel["type"] != "row"]
# Metric names in PromQL: a name followed by `{`, `[` or `)`, or alone in a function's parentheses.
_NAME = re.compile(r"\b((?:nv|trtllm|mmd)_[a-z0-9_]+)\b")


def _names(expr: str) -> set[str]:
    return set(_NAME.findall(expr))


def _table_series() -> set[str]:
    series = {s.series for facts in SCALING_METRICS.values() for s in facts.sources.values()}
    for facts in SCALING_METRICS.values():
        for source in facts.sources.values():
            series |= _names(source.query)
    for counters in ANALYSIS_SERIES.values():
        series |= {counters.answered, counters.latency} | ({counters.failed} if counters.failed else set())
    return series


def test_the_committed_file_is_the_generated_dashboard() -> None:
    assert dashboard.dashboard() == COMMITTED
    assert COMMITTED["uid"] == dashboard.UID and COMMITTED["title"]


def test_every_panel_has_a_query_and_a_unique_id_and_place() -> None:
    ids = [panel["id"] for panel in COMMITTED["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in PANELS:
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["description"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        covered = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not covered & cells, f"{panel['title']} overlaps another panel"
        cells |= covered
    titles = [panel["title"] for panel in PANELS]
    assert len(titles) == len(set(titles))


def test_the_variables_pick_a_namespace_and_a_resource_from_the_operators_series() -> None:
    variables = {variable["name"]: variable for variable in COMMITTED["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    assert variables["namespace"]["definition"] == "label_values(mmd_resource_phase, namespace)"
    assert (
        variables["resource"]["definition"]
        == 'label_values(mmd_resource_phase{namespace="$namespace"}, name)'
    )


def test_every_serving_query_comes_from_the_table_and_reads_one_resource() -> None:
    table = _table_series()
    shown: set[str] = set()
    for panel in PANELS:
        for target in panel["targets"]:
            serving = {name for name in _names(target["expr"]) if not name.startswith("mmd_")}
            shown |= serving
            assert serving <= table, f"{panel['title']}: {serving - table} is in no table of scaling_metrics"
            selectors = re.findall(r"(\b[a-z0-9_]+)\{([^}]*)\}", target["expr"])
            for name, matchers in selectors:
                if not name.startswith("mmd_"):
                    assert 'namespace="$namespace"' in matchers and 'mmd_resource="$resource"' in matchers, (
                        name
                    )
                elif "$resource" in matchers:
                    assert 'namespace="$namespace"' in matchers and 'name="$resource"' in matchers, name
    # Every series of the table has a panel.
    assert table <= shown, table - shown


def test_the_adapters_queries_are_the_scaling_panels_own() -> None:
    exprs = {target["expr"] for panel in PANELS for target in panel["targets"]}
    for facts in SCALING_METRICS.values():
        for source in facts.sources.values():
            assert dashboard.adapter_query(source) in exprs
    assert "<<" not in json.dumps(COMMITTED) and "{window}" not in json.dumps(COMMITTED)


def test_a_runtime_without_a_series_is_named_in_the_panels_description() -> None:
    structured = {panel.title: panel for row in dashboard.panels() for panel in row.panels}
    pending = structured["Pending requests"]
    assert {target.runtime for target in pending.targets} == {Runtime.TRITON_TRTLLM_ENGINE}
    reason = SCALING_METRICS[ScalingMetric.PENDING_REQUESTS].unavailable[Runtime.TRTLLM_SERVE]
    assert f"Not on trtllm-serve: {reason}." in pending.description
    failed = structured["Failed requests"]
    assert {target.runtime for target in failed.targets} == {Runtime.TRITON_TRTLLM_ENGINE}
    assert ANALYSIS_SERIES[Runtime.TRTLLM_SERVE].failures_unavailable in failed.description
    for title in ("Requests answered", "Queue time per request", "Latency per request"):
        assert {target.runtime for target in structured[title].targets} == set(Runtime), title
    # Panels of one resource say so; the operator's do not read the variables.
    for panel in structured.values():
        reads = any("$resource" in target.expr for target in panel.targets)
        assert reads == panel.per_resource, panel.title


def test_grafana_variables_become_a_concrete_query() -> None:
    expr = dashboard.concrete(f"rate(x{{{dashboard.SERVING}}}[{dashboard.RATE}])", "ml", "llava", "2m")
    assert expr == 'rate(x{namespace="ml",mmd_resource="llava"}[2m])'


def test_the_user_docs_describe_every_panel() -> None:
    doc = (ROOT / "docs" / "observability.md").read_text()
    missing = [panel["title"] for panel in PANELS if f"| {panel['title']} |" not in doc]
    assert not missing, f"docs/observability.md has no row for {missing}"
