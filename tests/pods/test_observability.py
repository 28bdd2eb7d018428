"""The chart's dashboard and alerts on the real-pod cluster's real Prometheus, both runtimes.

One fleet for the module, in a namespace of its own: llava on Triton (its engine built in a real pod) and
qwen2_5_vl on trtllm-serve (its weights downloaded from the Hub double), both with `serving.autoscaling`,
each answering a few requests through its Service (the serving pods' request series exist only once a
request was served); and a second trtllm-serve resource whose new revision cannot start (an image that
cannot be pulled), which the operator rolls back. The metrics path's Prometheus scrapes the serving pods
(with the `mmd_resource` label), the operator's own /metrics (the chart's pod), and evaluates the chart's
alerting rules file as it is, every 5 s. Then:

- every query of the dashboard (tools/dashboard.py, the file the chart ships), with the template variables
  filled in for the resource of the runtime it reads and the rate window at 2m, returns at least one
  series; so do the variables' own label queries;
- every alerting rule is loaded and evaluates without error, the operator is neither down nor leaderless,
  and MMDRollback fires for the rolled-back resource (its rule has no `for`: it fires at the first
  evaluation after the scrape that saw the rollback counted), read from /api/v1/alerts.

The operator's per-resource metrics (mmd_resource_phase, mmd_serving_pods, mmd_autoscaler_*,
mmd_rollbacks_total, mmd_downloads_total, mmd_artifacts_running) come with issue 34's operator metrics;
without them these tests fail, naming the queries that found nothing.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from mmd_operator.judgement.revisions import ROLLED_BACK
from mmd_operator.knowledge import Runtime
from mmd_testbed.localcluster import monitoring
from mmd_testbed.localcluster.cluster import LocalCluster
from tests.support.kube import Kube, Resources, new_namespace
from tests.support.pods import example, mmctl_chat, mmctl_infer, service_ip, wait_until
from tools import dashboard

pytestmark = pytest.mark.pods
REPO = Path(__file__).resolve().parents[2]
# Targets at most this far above the queue time a few requests see: the autoscalers stay at one pod.
AUTOSCALING = {"minReplicas": 1, "maxReplicas": 2, "metric": {"name": "QueueTimePerRequest", "target": 60000}}
SERVED = {Runtime.TRITON_TRTLLM_ENGINE: "llava", Runtime.TRTLLM_SERVE: "qwen2-5-vl"}
ROLLED = "qwen-rollback"
BAD_IMAGE = "registry.invalid/mmd/no-such-server:0"
REQUESTS = 3
# Grafana's $__rate_interval is at least four scrape intervals; 2m also covers the time since the requests.
RATE_WINDOW = "2m"
# The panels drawn with matplotlib from the same series, as docs/observability.md shows them.
PICTURE = REPO / "out" / "dashboard" / "mmd-operator.png"


@dataclass(frozen=True)
class Fleet:
    """The module's resources, and where this host reaches the cluster's Prometheus."""

    namespace: str
    prometheus: str


def _rolled_back(status: dict[str, Any]) -> bool:
    ready: dict[str, Any] = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
    return ready.get("reason") == ROLLED_BACK and bool(status.get("rollback"))


def _ask(kube: Kube, namespace: str, picture: Path) -> None:
    """A few requests to each serving resource, through its Service, all answered."""
    llava = f"grpc://{service_ip(kube, namespace, SERVED[Runtime.TRITON_TRTLLM_ENGINE])}:8001"
    qwen = f"http://{service_ip(kube, namespace, SERVED[Runtime.TRTLLM_SERVE])}:8000"
    for _ in range(REQUESTS):
        answer = mmctl_infer(
            llava, "--model-type", "llava", "--image", str(picture), "--timeout", "20", timeout=60
        )
        assert answer.returncode == 0, answer.stderr
        chat = mmctl_chat(
            qwen, "--image", str(picture), "--text", "What is this?", "--timeout", "20", timeout=60
        )
        assert chat.returncode == 0, chat.stderr


@pytest.fixture(scope="module")
def fleet(
    real_cluster: LocalCluster,
    api_client: k8s.ApiClient,
    kube: Kube,
    operator_release: dict[str, Any],
    picture: Path,
) -> Iterator[Fleet]:
    real_cluster.start_metrics()
    namespace = new_namespace(kube, "observability")
    resources = Resources(kube=kube, custom=k8s.CustomObjectsApi(api_client), namespace=namespace)
    try:
        resources.apply(example("llava", serving={"autoscaling": AUTOSCALING}))
        resources.apply(example("qwen2_5_vl", serving={"autoscaling": AUTOSCALING}))
        surge = {"rollout": {"strategy": "SurgeWhenPossible"}}
        rolled = example("qwen2_5_vl", serving=surge)
        rolled["metadata"]["name"] = ROLLED
        resources.apply(rolled)
        resources.wait_phase(SERVED[Runtime.TRITON_TRTLLM_ENGINE], "Ready", timeout=300)
        resources.wait_phase(SERVED[Runtime.TRTLLM_SERVE], "Ready", timeout=240)
        resources.wait_phase(
            ROLLED, "Ready", timeout=240, status_also=lambda s: bool(s.get("stableRevision"))
        )
        bad = example("qwen2_5_vl", serving={**surge, "image": BAD_IMAGE})
        bad["metadata"]["name"] = ROLLED
        resources.apply(bad)
        resources.wait_phase(ROLLED, "Degraded", timeout=240, status_also=_rolled_back)
        _ask(kube, namespace, picture)
        address = service_ip(kube, monitoring.NAMESPACE, monitoring.PROMETHEUS)
        yield Fleet(namespace=namespace, prometheus=f"http://{address}:{monitoring.PROMETHEUS_PORT}")
    finally:
        kube.core.delete_namespace(namespace, propagation_policy="Background")


def _get(prometheus: str, path: str, **params: str) -> Any:
    url = f"{prometheus}{path}?{urllib.parse.urlencode(params)}" if params else f"{prometheus}{path}"
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            body = json.load(answer)
    except urllib.error.HTTPError as error:  # a query Prometheus refuses: its own words
        return {"status": "error", "error": error.read().decode(errors="replace")}
    return body


def _series(prometheus: str, expr: str) -> tuple[int, str]:
    """How many series `expr` returns now, and Prometheus's error if it refused it."""
    body = _get(prometheus, "/api/v1/query", query=expr)
    if body.get("status") != "success":
        return 0, str(body.get("error"))
    return len(body["data"]["result"]), ""


def _queries(namespace: str) -> list[tuple[str, str]]:
    """(what, query) for every target of the dashboard, as Grafana sends it for each resource it reads."""
    found = []
    for row in dashboard.panels():
        for panel in row.panels:
            for target in panel.targets:
                if target.runtime is not None:
                    resources = [SERVED[target.runtime]]
                elif panel.per_resource:
                    resources = list(SERVED.values())
                else:
                    resources = [""]
                for resource in resources:
                    expr = dashboard.concrete(target.expr, namespace, resource, RATE_WINDOW)
                    found.append((f"{panel.title} [{resource or 'all'}]", expr))
    return found


@pytest.mark.timeout(1500)
def test_every_dashboard_query_finds_series_on_the_real_prometheus(fleet: Fleet) -> None:
    committed = json.loads((REPO / dashboard.DASHBOARD_FILE).read_text())
    shipped = {target["expr"] for panel in committed["panels"] for target in panel.get("targets", [])}
    assert shipped == {t.expr for row in dashboard.panels() for p in row.panels for t in p.targets}
    queries = _queries(fleet.namespace)
    empty: dict[str, str] = {}

    def all_found() -> bool:
        empty.clear()
        for what, expr in queries:
            count, error = _series(fleet.prometheus, expr)
            if not count:
                empty[what] = f"{expr}\n    {error or 'no series'}"
        return not empty

    # A few scrapes and rule evaluations after the last request, every series is there.
    with contextlib.suppress(AssertionError):  # the assertion below names what is missing
        wait_until("every dashboard query to find series", all_found, timeout=120, interval=5)
    assert not empty, "dashboard queries that found nothing:\n" + "\n".join(
        f"  {k}: {v}" for k, v in empty.items()
    )
    # What Grafana would draw, from the same series (no Grafana here): docs/observability.md shows it.
    drawn = _draw(fleet, queries, PICTURE)
    assert drawn.stat().st_size > 50_000

    # The template variables' own queries (Grafana's label_values) list this namespace and its resources.
    namespaces = _get(fleet.prometheus, "/api/v1/label/namespace/values", **{"match[]": "mmd_resource_phase"})
    assert fleet.namespace in namespaces["data"]
    names = _get(
        fleet.prometheus,
        "/api/v1/label/name/values",
        **{"match[]": f'mmd_resource_phase{{namespace="{fleet.namespace}"}}'},
    )
    assert set(names["data"]) == {*SERVED.values(), ROLLED}, names


def _draw(fleet: Fleet, queries: list[tuple[str, str]], path: Path) -> Path:
    """Every panel's series over the last ten minutes, one small plot per panel and resource, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = time.time()
    panels: dict[str, list[tuple[str, list[float], list[float]]]] = {}
    for what, expr in queries:
        body = _get(
            fleet.prometheus, "/api/v1/query_range", query=expr, start=str(end - 600), end=str(end), step="5"
        )
        for series in body.get("data", {}).get("result", []):
            labels = {k: v for k, v in series["metric"].items() if k not in ("__name__", "namespace")}
            times = [(float(at) - end) / 60 for at, _ in series["values"]]
            values = [float(value) for _, value in series["values"]]
            panels.setdefault(what, []).append(
                (",".join(f"{k}={v}" for k, v in labels.items()), times, values)
            )
    columns = 4
    rows = (len(panels) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(16, 2.6 * rows), squeeze=False)
    for axis, (what, lines) in zip(axes.flat, panels.items(), strict=False):
        for label, times, values in lines:
            axis.plot(times, values, label=label[:40] or "value")
        axis.set_title(what, fontsize=8)
        axis.tick_params(labelsize=6)
        axis.legend(fontsize=5, loc="upper left")
    for axis in list(axes.flat)[len(panels) :]:
        axis.set_visible(False)
    figure.suptitle(
        "mmd-operator dashboard: the panels' series from the real Prometheus (minutes before now)"
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path


def _rules_file_alerts() -> set[str]:
    rules = yaml.safe_load((REPO / monitoring.ALERT_RULES).read_text())
    return {rule["alert"] for group in rules["groups"] for rule in group["rules"]}


@pytest.mark.timeout(1500)
def test_the_rollback_alert_fires_on_the_real_prometheus(fleet: Fleet) -> None:
    # Every rule of the chart's file is loaded, and evaluates against the real series without an error.
    groups = _get(fleet.prometheus, "/api/v1/rules", type="alert")["data"]["groups"]
    loaded = [rule for group in groups for rule in group["rules"]]
    assert {rule["name"] for rule in loaded} == _rules_file_alerts()
    unhealthy = [(rule["name"], rule.get("lastError")) for rule in loaded if rule["health"] != "ok"]
    assert not unhealthy, unhealthy

    def firing() -> dict[str, Any] | None:
        alerts = _get(fleet.prometheus, "/api/v1/alerts")["data"]["alerts"]
        return next(
            (
                alert
                for alert in alerts
                if alert["labels"].get("alertname") == "MMDRollback"
                and alert["labels"].get("namespace") == fleet.namespace
                and alert["labels"].get("name") == ROLLED
                and alert["state"] == "firing"
            ),
            None,
        )

    started = time.monotonic()
    alert = wait_until("MMDRollback firing for the rolled-back resource", firing, timeout=120, interval=2)
    waited = time.monotonic() - started
    print(f"\nMMDRollback firing {waited:.0f} s after the dashboard's check: {alert['labels']}")
    assert alert["labels"]["severity"] == "warning" and alert["labels"]["reason"], alert
    annotations = alert["annotations"]
    assert f"{fleet.namespace}/{ROLLED}" in annotations["summary"], annotations
    assert annotations["runbook_url"].endswith("docs/alerts.md#mmdrollback")
    # The operator is scraped and leads: neither of its own alerts is even pending.
    alerts = _get(fleet.prometheus, "/api/v1/alerts")["data"]["alerts"]
    own = [a for a in alerts if a["labels"].get("alertname") in ("MMDOperatorDown", "MMDOperatorNotLeading")]
    assert not own, own
