"""The local cluster's metrics path without a cluster: what Prometheus scrapes and which labels it writes,
the alerting rules it loads, the adapter's rules, the aggregation layer's certificates, the pinned
versions."""

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

ROOT = Path(__file__).resolve().parents[2]
# The chart rendered with its defaults (`make generate`): the operator's pod as the test bed installs it.
PLAIN_MANIFESTS = ROOT / "deploy" / "mmd-operator.yaml"


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
                "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
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


def _operator_deployment() -> dict[str, Any]:
    (deployment,) = (
        document
        for document in yaml.safe_load_all(PLAIN_MANIFESTS.read_text())
        if document and document["kind"] == "Deployment"
    )
    return dict(deployment)


def test_every_serving_series_names_its_resource_as_the_charts_podmonitor_does() -> None:
    jobs = {job["job_name"]: job for job in monitoring.prometheus_config()["scrape_configs"]}
    for name in ("triton", "trtllm-serve"):
        assert {
            "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"],
            "target_label": "mmd_resource",
        } in jobs[name]["relabel_configs"]
        assert not jobs[name].get("honor_labels")


def test_prometheus_scrapes_the_operators_own_metrics_port_and_keeps_its_labels() -> None:
    (job,) = (j for j in monitoring.prometheus_config()["scrape_configs"] if j["job_name"] == "mmd-operator")
    operator = _operator_deployment()
    port = next(
        p["containerPort"]
        for c in operator["spec"]["template"]["spec"]["containers"]
        for p in c["ports"]
        if p["name"] == "metrics"
    )
    assert _targets(job, operator) == [("operator", port)]
    # No serving pod is taken for the operator, nor the operator for a serving pod.
    assert _targets(job, serving_deployment("llava")) == []
    jobs = {j["job_name"]: j for j in monitoring.prometheus_config()["scrape_configs"]}
    assert _targets(jobs["triton"], operator) == _targets(jobs["trtllm-serve"], operator) == []
    # The operator's per-resource series name the resource's namespace, not the operator pod's.
    assert job["honor_labels"] is True
    assert job["metrics_path"] == "/metrics"
    # Found wherever the chart is installed: discovery is cluster-wide, as Prometheus's role allows.
    assert "namespaces" not in job["kubernetes_sd_configs"][0]


def test_prometheus_evaluates_the_charts_own_alerting_rules_every_scrape(tmp_path: Path) -> None:
    rules = monitoring.alert_rules(ROOT)
    assert rules == (ROOT / "charts" / "mmd-operator" / "files" / "alerts.yaml").read_text()
    config = monitoring.prometheus_config()
    assert config["global"]["evaluation_interval"] == f"{monitoring.SCRAPE_SECONDS}s"
    objects = monitoring.prometheus_objects("p:1", rules)
    (mounted,) = (
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "prometheus-rules"
    )
    (deployment,) = (o for o in objects if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (mount,) = (m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "rules")
    (volume,) = (v for v in pod["volumes"] if v["name"] == "rules")
    assert volume["configMap"]["name"] == "prometheus-rules"
    (key,) = mounted["data"]
    assert mounted["data"][key] == rules
    (pattern,) = config["rule_files"]
    assert Path(pattern).parent == Path(mount["mountPath"]) and Path(key).match(Path(pattern).name)
    # A changed rule file rolls Prometheus, which reads it at start only.
    other = monitoring.prometheus_objects("p:1", rules + "\n")
    digests = [
        next(o for o in found if o["kind"] == "Deployment")["spec"]["template"]["metadata"]["annotations"]
        for found in (objects, other)
    ]
    assert digests[0] != digests[1]


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
    objects = {
        (o["kind"], o["metadata"]["name"]): o for o in monitoring.objects(credentials, names, "groups: []\n")
    }
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
