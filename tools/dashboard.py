"""The Grafana dashboard of the operator and its serving fleet, generated from the operator's own tables.

`make generate` writes it into the chart (`dashboards/mmd-operator.json`), which renders it into a ConfigMap
for Grafana's dashboard sidecar (`dashboards.enabled`); it can also be imported as it is. Two rows: the
operator (reconciles, their duration and errors, API requests, resources per phase, the leader, pods
marked not ready, rollbacks) and the serving fleet, one resource at a time through the template variables
`namespace` and `resource` (its phase, requests answered and failed, queue time, pending requests,
latency, serving pods, the autoscaler, and the builds and downloads behind them).

The serving pods' series differ per runtime, so every serving query comes from the one table that names
them, `mmd_operator.scaling_metrics` (the adapter's queries of `SCALING_METRICS`, the canary's counters of
`ANALYSIS_SERIES`), narrowed to the resource by the `mmd_resource` label the chart's PodMonitor writes; a
panel says in its description which runtime has no such series, and why. The operator's metric names are
the operator's (`mmd_operator.metrics`, docs/observability.md). `panels()` is the structured form the tests
read (each target with the runtime it is for); `dashboard()` the Grafana JSON model. Maintainer tooling:
imports the operator's scaling-metric table and knowledge, and `chart` for where the chart lives.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mmd_operator.knowledge import Runtime
from mmd_operator.scaling_metrics import ANALYSIS_SERIES, SCALING_METRICS, MetricSource, ScalingMetric
from tools import chart

DASHBOARD_FILE = f"{chart.CHART_DIR}/dashboards/mmd-operator.json"
UID = "mmd-operator"
# Grafana's own variables: the step-aware rate window, and the data source picked at the top.
RATE = "$__rate_interval"
_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# The operator's per-resource series carry the resource's namespace and name; the serving pods' series
# their namespace and, from their app.kubernetes.io/instance label, the resource's name.
RESOURCE = 'namespace="$namespace",name="$resource"'
SERVING = 'namespace="$namespace",mmd_resource="$resource"'
# The operator's own series of the process that leads (a standby exports zeros, or what it last knew).
_LEADER = "on (namespace, pod) (mmd_is_leader == 1)"


@dataclass(frozen=True)
class Target:
    """One query of a panel; `runtime` is the runtime whose serving pods it reads (None: the operator)."""

    expr: str
    legend: str
    runtime: Runtime | None = None
    # The current value only (a stat of the phase), not a range.
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    """One panel: what it shows, in which unit, from which queries."""

    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]
    kind: str = "timeseries"
    # Whether its queries read the `namespace` and `resource` variables.
    per_resource: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    """A titled row of panels."""

    title: str
    panels: tuple[Panel, ...]


def _rate(series: str, matchers: str) -> str:
    return f"rate({series}{{{matchers}}}[{RATE}])"


def _serving_matchers(extra: str) -> str:
    return f"{SERVING},{extra}" if extra else SERVING


def adapter_query(source: MetricSource) -> str:
    """The adapter's query of `source` (scaling_metrics) for the dashboard's resource, one value per pod."""
    return (
        source.query.replace("<<.GroupBy>>", "pod")
        .replace("<<.LabelMatchers>>", SERVING)
        .replace("{window}", RATE)
    )


def _not_on(runtimes: Mapping[Runtime, str]) -> str:
    return "".join(f" Not on {runtime}: {why}." for runtime, why in runtimes.items())


def _scaling_panel(metric: ScalingMetric, title: str, unit: str, about: str) -> Panel:
    facts = SCALING_METRICS[metric]
    targets = tuple(
        Target(adapter_query(source), "{{pod}}", runtime) for runtime, source in facts.sources.items()
    )
    description = (
        f"{about} The query the autoscaler's adapter runs for {facts.metric}.{_not_on(facts.unavailable)}"
    )
    return Panel(title, description, unit, targets, per_resource=True)


def _analysis_panel(title: str, unit: str, about: str, counter: str) -> Panel:
    """Answered, failed or mean latency per pod from each runtime's counters (`ANALYSIS_SERIES`)."""
    targets = []
    missing: dict[Runtime, str] = {}
    for runtime, series in ANALYSIS_SERIES.items():
        matchers = _serving_matchers(series.matchers)
        answered = f"sum by (pod) ({_rate(series.answered, matchers)})"
        if counter == "answered":
            expr = answered
        elif counter == "latency":
            scale = "" if series.latency_scale == 1 else f" * {series.latency_scale:g}"
            expr = f"sum by (pod) ({_rate(series.latency, matchers)}){scale} / {answered}"
        elif series.failed is not None:
            expr = f"sum by (pod) ({_rate(series.failed, matchers)})"
        else:
            missing[runtime] = series.failures_unavailable
            continue
        targets.append(Target(expr, "{{pod}}", runtime))
    description = f"{about} The counters a canary's analysis reads.{_not_on(missing)}"
    return Panel(title, description, unit, tuple(targets), per_resource=True)


def _operator(expr: str, legend: str) -> tuple[Target, ...]:
    return (Target(expr, legend),)


def operator_row() -> Row:
    """The operator's own panels."""
    reconciles = f"sum(rate(mmd_reconciles_total[{RATE}]))"
    return Row(
        "Operator",
        (
            Panel(
                "Reconciles by outcome",
                "Reconciles per second: changed (something was written), unchanged, error.",
                "ops",
                _operator(f"sum by (outcome) (rate(mmd_reconciles_total[{RATE}]))", "{{outcome}}"),
            ),
            Panel(
                "Reconcile duration",
                "One reconcile, from the cache read to its last write: median and 99th percentile.",
                "s",
                tuple(
                    Target(
                        f"histogram_quantile({quantile}, sum by (le) "
                        f"(rate(mmd_reconcile_duration_seconds_bucket[{RATE}])))",
                        f"p{round(quantile * 100)}",
                    )
                    for quantile in (0.5, 0.99)
                ),
            ),
            Panel(
                "Reconcile errors",
                "Reconciles per second that ended in an error (the operator retries them; its log says "
                "why). 0, not nothing, while there are none.",
                "ops",
                _operator(
                    f'sum(rate(mmd_reconciles_total{{outcome="error"}}[{RATE}])) or {reconciles} * 0',
                    "errors",
                ),
            ),
            Panel(
                "API requests by method",
                "Requests per second the operator's own client sends to the API server (its watches not "
                "counted): at rest, none.",
                "reqps",
                _operator(f"sum by (method) (rate(mmd_api_requests_total[{RATE}]))", "{{method}}"),
            ),
            Panel(
                "Resources per phase",
                "MultimodalDeployments per phase, as the leading operator process counts them.",
                "short",
                _operator(f"sum by (phase) (mmd_resources and {_LEADER})", "{{phase}}"),
            ),
            Panel(
                "Leader",
                "1 for the process that reconciles (holds the Lease, or runs without leader election), 0 for "
                "a standby.",
                "short",
                _operator("max by (pod) (mmd_is_leader)", "{{pod}}"),
            ),
            Panel(
                "Leader transitions",
                "Each process's count of Lease changes since it started: acquired, released at shutdown, "
                "lost. A step is a transition.",
                "short",
                _operator("sum by (pod, change) (mmd_leader_transitions_total)", "{{pod}} {{change}}"),
            ),
            Panel(
                "Pods marked not ready",
                "Serving pods the operator marked not ready because their node stopped renewing its Lease, "
                "per interval.",
                "short",
                _operator(f"sum(increase(mmd_pods_marked_not_ready_total[{RATE}]))", "marked not ready"),
            ),
            Panel(
                "Rollbacks",
                "New revisions undone, per resource and reason, counted by the leading process since it "
                "started: a step is a rollback (docs/alerts.md#mmdrollback).",
                "short",
                _operator(
                    "sum by (namespace, name, reason) (mmd_rollbacks_total)",
                    "{{namespace}}/{{name}} {{reason}}",
                ),
            ),
        ),
    )


def serving_row() -> Row:
    """The serving fleet's panels, for the resource the variables pick."""
    return Row(
        "Serving: $namespace/$resource",
        (
            Panel(
                "Phase",
                "The resource's phase now (docs/troubleshooting.md#phases).",
                "none",
                (Target(f"max by (phase) (mmd_resource_phase{{{RESOURCE}}})", "{{phase}}", instant=True),),
                kind="stat",
                per_resource=True,
                options={"textMode": "name", "colorMode": "none", "graphMode": "none"},
            ),
            _analysis_panel(
                "Requests answered", "reqps", "Requests answered per second, per pod.", "answered"
            ),
            _analysis_panel(
                "Failed requests", "reqps", "Requests that failed per second, per pod.", "failed"
            ),
            _scaling_panel(
                ScalingMetric.QUEUE_TIME_PER_REQUEST,
                "Queue time per request",
                "s",
                "Average time a request waited in the server's queues, per pod (0 while idle).",
            ),
            _scaling_panel(
                ScalingMetric.PENDING_REQUESTS,
                "Pending requests",
                "short",
                "Requests the server holds that have not started, per pod.",
            ),
            _analysis_panel(
                "Latency per request",
                "s",
                "Mean time a request took from arrival to answer, per pod.",
                "latency",
            ),
            Panel(
                "Serving pods: ready of wanted",
                "Ready serving pods, and how many the resource wants now (the autoscaler's desired replicas "
                "with spec.serving.autoscaling, else spec.serving.replicas).",
                "short",
                (Target(f"max by (state) (mmd_serving_pods{{{RESOURCE}}})", "{{state}}"),),
                per_resource=True,
            ),
            Panel(
                "Autoscaler replicas",
                "Only with spec.serving.autoscaling: its bounds, the replicas the HorizontalPodAutoscaler "
                "wants, and whether it is held at its maximum by its metric (1; docs/alerts.md"
                "#mmdautoscalersaturated).",
                "short",
                (
                    Target(f"max by (bound) (mmd_autoscaler_replicas{{{RESOURCE}}})", "{{bound}}"),
                    Target(f"max(mmd_autoscaler_saturated{{{RESOURCE}}})", "saturated"),
                ),
                per_resource=True,
            ),
            Panel(
                "Builds and downloads running",
                "Engine build Jobs and trtllm-serve weights download Jobs running now, for every resource.",
                "short",
                _operator("sum by (artifact) (mmd_artifacts_running)", "{{artifact}}"),
            ),
            Panel(
                "Builds and downloads finished",
                "Engine builds and weights downloads finished, by outcome, for every resource, counted by "
                "each process since it started: a step is a finished Job (docs/alerts.md#mmdartifactfailed).",
                "short",
                (
                    Target("sum by (outcome) (mmd_builds_total)", "engine {{outcome}}"),
                    Target("sum by (outcome) (mmd_downloads_total)", "weights {{outcome}}"),
                ),
            ),
        ),
    )


def panels() -> list[Row]:
    """The dashboard's rows and panels, in order."""
    return [operator_row(), serving_row()]


_WIDTH = 8
_HEIGHT = 8


def _target(target: Target, ref: str) -> dict[str, Any]:
    return {
        "refId": ref,
        "datasource": _DATASOURCE,
        "expr": target.expr,
        "legendFormat": target.legend,
        "range": not target.instant,
        "instant": target.instant,
    }


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    options: dict[str, Any] = {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "none"},
    }
    if panel.kind == "stat":
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": _DATASOURCE,
        "gridPos": {"h": _HEIGHT, "w": _WIDTH, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit, "min": 0}, "overrides": []},
        "options": {**options, **panel.options},
        "targets": [_target(target, chr(ord("A") + index)) for index, target in enumerate(panel.targets)],
    }


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": _DATASOURCE,
        "query": {"query": query, "refId": name},
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "includeAll": False,
        "multi": False,
        "current": {},
        "options": [],
        "hide": 0,
    }


# The resources are found by the operator's own per-resource series (the leader publishes one each).
NAMESPACE_QUERY = "label_values(mmd_resource_phase, namespace)"
RESOURCE_QUERY = 'label_values(mmd_resource_phase{namespace="$namespace"}, name)'


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard model (schema 39, Grafana 10 and later)."""
    items: list[dict[str, Any]] = []
    next_id = 1
    y = 0
    for row in panels():
        items.append(
            {
                "id": next_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        for index, panel in enumerate(row.panels):
            x = (index % (24 // _WIDTH)) * _WIDTH
            if index and x == 0:
                y += _HEIGHT
            items.append(_panel(panel, next_id, x, y))
            next_id += 1
        y += _HEIGHT
    datasource = {
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "options": [],
        "hide": 0,
        "refresh": 1,
        "regex": "",
    }
    return {
        "uid": UID,
        "title": "mmd-operator",
        "description": "The mmd-operator and the serving pods of its MultimodalDeployments "
        "(generated by tools/dashboard.py; docs/observability.md).",
        "tags": ["mmd-operator"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [],
        "templating": {
            "list": [
                datasource,
                _variable("namespace", "Namespace", NAMESPACE_QUERY),
                _variable("resource", "MultimodalDeployment", RESOURCE_QUERY),
            ]
        },
        "panels": items,
    }


def concrete(expr: str, namespace: str, resource: str, rate_interval: str = "1m") -> str:
    """`expr` as Grafana sends it for `namespace` and `resource`, with `rate_interval` for the rate window."""
    return expr.replace(RATE, rate_interval).replace("$namespace", namespace).replace("$resource", resource)


def dashboard_json() -> str:
    """The dashboard as the chart carries it."""
    return json.dumps(dashboard(), indent=2) + "\n"


def generated_files() -> dict[str, str]:
    """The dashboard, relative to the repository root."""
    return {DASHBOARD_FILE: dashboard_json()}
