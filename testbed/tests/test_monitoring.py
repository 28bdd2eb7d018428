"""The local cluster's metrics path without a cluster: what Prometheus scrapes, the adapter's rules, the
aggregation layer's certificates, the pinned versions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from mmd_operator import scaling_metrics
from mmd_testbed.localcluster import monitoring
from mmd_testbed.localcluster.layout import Layout, MetricsVersions
from mmd_testbed.localcluster.pki import FRONT_PROXY_CLIENT, generate_credentials, issue_certificate
from tests.support.examples import serving_deployment


def _targets(job: dict[str, Any], deployment: dict[str, Any]) -> list[tuple[str, int]]:
    """(container, port) of every target Prometheus's pod role keeps from the Deployment's Running pod."""
    template = deployment["spec"]["template"]
    selector = dict(
        pair.split("=") for pair in job["kubernetes_sd_configs"][0]["selectors"][0]["label"].split(",")
    )
    if not selector.items() <= template["metadata"]["labels"].items():
        return []
    kept = []
    for container in template["spec"]["containers"]:
        for port in container.get("ports", []):
            meta = {
                "__meta_kubernetes_pod_phase": "Running",
                "__meta_kubernetes_pod_container_name": container["name"],
                "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
            }
            rules = [rule for rule in job["relabel_configs"] if rule.get("action") == "keep"]
            if all(re.fullmatch(rule["regex"], meta[rule["source_labels"][0]]) for rule in rules):
                kept.append((container["name"], port["containerPort"]))
    return kept


def test_prometheus_scrapes_tritons_metrics_port_and_trtllm_serves_prometheus_path() -> None:
    jobs = {job["job_name"]: job for job in monitoring.prometheus_config()["scrape_configs"]}
    llava, qwen = serving_deployment("llava"), serving_deployment("qwen2_5_vl")
    # Exactly one target per serving pod: the metrics port of tritonserver, trtllm-serve's own port.
    assert _targets(jobs["triton"], llava) == [("tritonserver", 8002)]
    assert _targets(jobs["triton"], qwen) == []
    assert _targets(jobs["trtllm-serve"], qwen) == [("trtllm-serve", 8000)]
    assert _targets(jobs["trtllm-serve"], llava) == []
    assert jobs["triton"]["metrics_path"] == "/metrics"
    assert jobs["trtllm-serve"]["metrics_path"] == "/prometheus/metrics"
    for job in jobs.values():
        written = {rule["target_label"] for rule in job["relabel_configs"] if "target_label" in rule}
        assert {"namespace", "pod"} <= written  # what the adapter's rules map to pods


def test_the_adapter_rules_map_series_to_pods_and_fill_in_the_hpas_selector() -> None:
    rules = yaml.safe_load(scaling_metrics.adapter_config_yaml())["rules"]
    names = {rule["name"]["as"] for rule in rules}
    assert {"mmd_triton_queue_time_per_request_seconds", "mmd_triton_pending_requests"} <= names
    for rule in rules:
        assert rule["seriesQuery"].endswith('{namespace!="",pod!=""}')
        assert rule["resources"]["overrides"] == {
            "namespace": {"resource": "namespace"},
            "pod": {"resource": "pod"},
        }
        assert "<<.LabelMatchers>>" in rule["metricsQuery"] and "<<.GroupBy>>" in rule["metricsQuery"]
    (queue,) = (r for r in rules if r["name"]["as"] == "mmd_triton_queue_time_per_request_seconds")
    assert "rate(nv_inference_queue_duration_us{" in queue["metricsQuery"]
    assert "rate(nv_inference_request_success{" in queue["metricsQuery"]


def test_prometheus_may_only_read_pods_and_the_apiservice_verifies_the_adapter(tmp_path: Path) -> None:
    credentials = generate_credentials(tmp_path)
    names = {monitoring.PROMETHEUS: "p:1", monitoring.ADAPTER: "a:1"}
    objects = {(o["kind"], o["metadata"]["name"]): o for o in monitoring.objects(credentials, names)}
    role = objects[("ClusterRole", "mmd-local:prometheus")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    service = objects[("APIService", "v1beta1.custom.metrics.k8s.io")]["spec"]
    assert "insecureSkipTLSVerify" not in service
    assert service["service"] == {"name": "prometheus-adapter", "namespace": "monitoring", "port": 6443}
    cert = x509.load_pem_x509_certificate((tmp_path / "prometheus-adapter.crt").read_bytes())
    names_in_cert = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "prometheus-adapter.monitoring.svc" in names_in_cert.get_values_for_type(x509.DNSName)
    # No secret in a ConfigMap: the adapter's key travels in its Secret only.
    for (kind, _), body in objects.items():
        if kind == "ConfigMap":
            assert "PRIVATE KEY" not in yaml.safe_dump(body)


def test_the_front_proxy_client_is_signed_by_its_own_ca_not_the_clusters(tmp_path: Path) -> None:
    credentials = generate_credentials(tmp_path)
    client = x509.load_pem_x509_certificate(credentials.front_proxy_client_cert.read_bytes())
    front_ca = x509.load_pem_x509_certificate(credentials.front_proxy_ca_cert.read_bytes())
    cluster_ca = x509.load_pem_x509_certificate(credentials.ca_cert.read_bytes())
    assert client.subject.rfc4514_string() == f"CN={FRONT_PROXY_CLIENT}"
    client.verify_directly_issued_by(front_ca)
    assert client.issuer != cluster_ca.subject
    assert isinstance(front_ca.public_key(), ec.EllipticCurvePublicKey)
    served = x509.load_pem_x509_certificate(
        issue_certificate(credentials, "svc", common_name="a.b.svc", dns_names=("a.b",))[0].read_bytes()
    )
    san = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["a.b.svc", "a.b"]


def test_prometheus_module_versions_name_their_release() -> None:
    assert MetricsVersions("v0.316.0", "v0.12.0").prometheus_release == "3.16.0"
    assert MetricsVersions("v0.305.1", "v0.12.0").prometheus_release == "3.5.1"
    pinned = Layout.discover().metrics_versions
    assert pinned.prometheus_release.startswith("3.") and pinned.prometheus_adapter == "v0.12.0"
