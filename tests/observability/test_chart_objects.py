"""The chart's observability objects as the real helm renders them: the dashboard's ConfigMap for Grafana's
sidecar, the PrometheusRule, the ServiceMonitor and the serving PodMonitor; all off by default, and each
carrying exactly the file it is made of."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools import chart, dashboard

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / chart.CHART_DIR
RULES = CHART / "files" / "alerts.yaml"
OBSERVABILITY = ("ConfigMap", "PrometheusRule", "ServiceMonitor", "PodMonitor")


class Helm:
    """helm with a HOME of its own (it keeps its configuration and cache there), on the chart."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, env=self.env, timeout=120, check=False
        )

    def render(self, *values: str) -> list[dict[str, Any]]:
        result = self.run("template", "mmd", str(CHART), "-n", "mmd-system", *values)
        assert result.returncode == 0, result.stderr
        return [document for document in yaml.safe_load_all(result.stdout) if document]


@pytest.fixture
def chart_helm(helm: Path, tmp_path: Path) -> Helm:
    return Helm(helm, tmp_path)


def _kinds(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [document for document in documents if document["kind"] == kind]


def test_no_observability_object_unless_asked(chart_helm: Helm) -> None:
    kinds = {document["kind"] for document in chart_helm.render()}
    assert not kinds & set(OBSERVABILITY), kinds


def test_the_dashboard_configmap_carries_the_generated_json_under_the_sidecars_label(
    chart_helm: Helm,
) -> None:
    (config_map,) = _kinds(chart_helm.render("--set", "dashboards.enabled=true"), "ConfigMap")
    metadata = config_map["metadata"]
    assert metadata["namespace"] == "mmd-system"
    assert metadata["labels"]["grafana_dashboard"] == "1"
    (name, text) = config_map["data"].popitem()
    assert name.endswith(".json")
    assert text == (ROOT / dashboard.DASHBOARD_FILE).read_text().rstrip("\n")
    assert json.loads(text)["uid"] == dashboard.UID
    # Another sidecar's label and value, the namespace it watches, its folder annotation.
    (elsewhere,) = _kinds(
        chart_helm.render(
            "--set", "dashboards.enabled=true", "--set", "dashboards.label=grafana_dashboard_mmd",
            "--set", "dashboards.labelValue=yes", "--set", "dashboards.namespace=monitoring",
            "--set-string", "dashboards.annotations.grafana_folder=Serving",
        ),
        "ConfigMap",
    )  # fmt: skip
    assert elsewhere["metadata"]["namespace"] == "monitoring"
    assert elsewhere["metadata"]["labels"]["grafana_dashboard_mmd"] == "yes"
    assert "grafana_dashboard" not in elsewhere["metadata"]["labels"]
    assert elsewhere["metadata"]["annotations"] == {"grafana_folder": "Serving"}


def test_the_prometheusrule_is_the_rules_file_with_the_labels_asked_for(chart_helm: Helm) -> None:
    documents = chart_helm.render(
        "--set", "alerts.enabled=true", "--set", "alerts.labels.release=kube-prometheus"
    )
    (rule,) = _kinds(documents, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def test_the_scrapes_name_the_resource_and_keep_the_operators_namespace(chart_helm: Helm) -> None:
    documents = chart_helm.render(
        "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.servingPodMonitor.enabled=true"
    )
    (monitor,) = _kinds(documents, "ServiceMonitor")
    assert [endpoint["honorLabels"] for endpoint in monitor["spec"]["endpoints"]] == [True]
    (pods,) = _kinds(documents, "PodMonitor")
    endpoints = pods["spec"]["podMetricsEndpoints"]
    assert [endpoint["port"] for endpoint in endpoints] == ["metrics", "http"]
    for endpoint in endpoints:
        assert {
            "sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"],
            "targetLabel": "mmd_resource",
        } in endpoint["relabelings"]


def test_the_chart_lints_strictly_with_every_observability_object(chart_helm: Helm) -> None:
    values = [
        "--set", "dashboards.enabled=true", "--set", "alerts.enabled=true",
        "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.servingPodMonitor.enabled=true",
    ]  # fmt: skip
    linted = chart_helm.run("lint", "--strict", str(CHART), *values)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_the_schema_refuses_a_misspelt_observability_value(chart_helm: Helm) -> None:
    refused = chart_helm.run("template", "mmd", str(CHART), "--set", "dashboards.enable=true")
    assert refused.returncode != 0
    assert "dashboards" in refused.stderr and "enable" in refused.stderr
