"""The local cluster's metrics path: Prometheus and prometheus-adapter as pods on the real nodes.

`python -m mmd_testbed cluster up --metrics` adds, after the real nodes, what a cluster needs before a
HorizontalPodAutoscaler can scale serving pods on Triton's own metrics:

- **Prometheus** in the namespace `monitoring` (the namespace the serving pods' NetworkPolicy lets reach
  their metrics port by default). It finds the serving pods by Kubernetes service discovery, role `pod`,
  with the label selector every serving pod carries (watched server-side: it sees no other pod), and
  scrapes Triton's metrics port (`/metrics` on 8002) and trtllm-serve's `/prometheus/metrics` on 8000,
  every few seconds. Each series gets the `namespace`, `pod` and `container` labels a PodMonitor gives,
  which the adapter's rules map to pods, and `mmd_resource`, the resource's name, as the chart's
  PodMonitor writes it. It also scrapes the operator's own `/metrics` (the chart's pod, found by its
  labels in any namespace, on its `metrics` port) keeping the operator's `namespace` label, as the
  chart's ServiceMonitor does (`honorLabels`), and evaluates the chart's alerting rules
  (`charts/mmd-operator/files/alerts.yaml`, the very file the chart's PrometheusRule carries), so an
  alert can be seen firing. Its ServiceAccount may only get, list and watch pods.
- **prometheus-adapter**, registered through the aggregation layer as `v1beta1.custom.metrics.k8s.io`
  (an APIService whose serving certificate the API server verifies against the cluster CA), with the
  rules the operator's HPAs ask for (`scaling_metrics.adapter_config_yaml`, the rules docs/autoscaling.md
  tells users to add): the controller manager's real HPA controller reads the metric through the API
  server, as on any cluster.

Why prometheus-adapter and not KEDA: the operator owns its HorizontalPodAutoscaler (an `autoscaling/v2`
object applied with the Deployment), and KEDA would create and own an HPA of its own from a ScaledObject,
a second owner of `replicas`; KEDA is also an operator, webhooks and CRDs where the adapter is one process
serving the standard custom-metrics API any HPA reads. What KEDA adds (scale to zero, fallback replicas)
does not apply: a GPU server takes minutes to load, so the operator keeps at least one replica.

Both images are one layer each, written from the binaries `metricsbinaries` builds; nothing is pulled.

Imports: the standard library, PyYAML, the kubernetes client, this package's `addons`, `metricsbinaries`,
`nodes`, `pki`, and the operator's scaling-metric table and vocabulary (labels, ports, container names).
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from mmd_operator import scaling_metrics
from mmd_operator.plan.launch import HTTP_PORT, METRICS_PORT
from mmd_operator.plan.trtllm_serve import SERVER_CONTAINER as TRTLLM_SERVE_CONTAINER
from mmd_operator.vocabulary import labels
from mmd_testbed.localcluster.addons import binary_image
from mmd_testbed.localcluster.metricsbinaries import MetricsBinaries
from mmd_testbed.localcluster.nodes import NODE_KIND_LABEL, REAL
from mmd_testbed.localcluster.pki import Credentials, issue_certificate

NAMESPACE = "monitoring"
PROMETHEUS = "prometheus"
ADAPTER = "prometheus-adapter"
PROMETHEUS_PORT = 9090
# Where pods (the operator's canary analysis) reach Prometheus, by the cluster's DNS.
PROMETHEUS_URL = f"http://{PROMETHEUS}.{NAMESPACE}.svc.cluster.local:{PROMETHEUS_PORT}"
ADAPTER_PORT = 6443
CUSTOM_METRICS_GROUP = "custom.metrics.k8s.io"
CUSTOM_METRICS_VERSION = "v1beta1"
APISERVICE = f"{CUSTOM_METRICS_VERSION}.{CUSTOM_METRICS_GROUP}"
# Seconds between scrapes: the rate window of the adapter's rules (1 m) holds a dozen samples.
SCRAPE_SECONDS = 5
# How often the adapter asks Prometheus which series exist (upstream: 1 m): a new serving pod's metric is
# served within seconds of its first scrape.
RELIST_SECONDS = 10
TRTLLM_SERVE_METRICS_PATH = "/prometheus/metrics"
# The operator's pod as the chart labels it (`mmd-operator.labels`: the chart's name, component operator)
# and the container port its deployment template names for /metrics.
OPERATOR_POD_SELECTOR = f"{labels.NAME}=mmd-operator,{labels.COMPONENT}=operator"
OPERATOR_METRICS_PORT_NAME = "metrics"
# The chart's alerting rules, relative to the repository root; mounted into Prometheus as they are.
ALERT_RULES = Path("charts", "mmd-operator", "files", "alerts.yaml")
_RULES_DIR = "/etc/prometheus/rules"
# The label the chart's PodMonitor and this Prometheus write on every serving-pod series: the resource.
RESOURCE_LABEL = "mmd_resource"
_IMAGE_PREFIX = "localhost/mmd-local"
_NOBODY = 65534
_REAL_NODES = {NODE_KIND_LABEL: REAL}
_APP = "app.kubernetes.io/name"


def image_names(binaries: MetricsBinaries) -> dict[str, str]:
    """The reference of each metrics image."""
    versions = binaries.versions
    return {
        PROMETHEUS: f"{_IMAGE_PREFIX}/prometheus:v{versions.prometheus_release}",
        ADAPTER: f"{_IMAGE_PREFIX}/prometheus-adapter:{versions.prometheus_adapter}",
    }


def write_images(binaries: MetricsBinaries, directory: Path) -> list[Path]:
    """Write the two images into `directory` (kept when they exist); return their archives."""
    names = image_names(binaries)
    return [
        binary_image(directory / f"{name}.tar", names[name], binaries.path(name), f"bin/{name}")
        for name in (PROMETHEUS, ADAPTER)
    ]


# -- configuration ------------------------------------------------------------------------------------


def serving_pod_selector() -> str:
    """The label selector every serving pod of every MultimodalDeployment matches (either runtime)."""
    return f"{labels.COMPONENT}={labels.SERVING},{labels.MANAGED_BY}={labels.OPERATOR}"


def _meta(name: str) -> str:
    return f"__meta_kubernetes_{name}"


def _pod_job(job: str, selector: str, keep: dict[str, str], path: str) -> dict[str, Any]:
    """A pod-role job over the pods matching `selector`, keeping the targets whose meta labels match `keep`.

    Each series is labelled with its pod's namespace, name and container, as a PodMonitor's are.
    """
    relabel: list[dict[str, Any]] = [
        {"source_labels": [_meta("pod_phase")], "regex": "Running", "action": "keep"},
        *({"source_labels": [_meta(name)], "regex": value, "action": "keep"} for name, value in keep.items()),
        # What a PodMonitor's scrape writes, and what the adapter's rules map to pods.
        {"source_labels": [_meta("namespace")], "target_label": "namespace"},
        {"source_labels": [_meta("pod_name")], "target_label": "pod"},
        {"source_labels": [_meta("pod_container_name")], "target_label": "container"},
    ]
    return {
        "job_name": job,
        "metrics_path": path,
        "kubernetes_sd_configs": [{"role": "pod", "selectors": [{"role": "pod", "label": selector}]}],
        "relabel_configs": relabel,
    }


def _scrape_job(job: str, keep: dict[str, str], path: str) -> dict[str, Any]:
    """A job over the serving pods; each series also names its resource, as the chart's PodMonitor does."""
    scrape = _pod_job(job, serving_pod_selector(), keep, path)
    instance = _meta(f"pod_label_{labels.INSTANCE.replace('.', '_').replace('/', '_')}")
    scrape["relabel_configs"].append({"source_labels": [instance], "target_label": RESOURCE_LABEL})
    return scrape


def _operator_job() -> dict[str, Any]:
    """The operator's own /metrics, wherever the chart runs it."""
    scrape = _pod_job(
        "mmd-operator",
        OPERATOR_POD_SELECTOR,
        {"pod_container_port_name": OPERATOR_METRICS_PORT_NAME},
        "/metrics",
    )
    # The per-resource series carry the resource's own `namespace`, which must win over the target's.
    scrape["honor_labels"] = True
    return scrape


def prometheus_config() -> dict[str, Any]:
    """Prometheus's configuration: the serving pods' metrics, both runtimes, the operator's, the rules."""
    interval = f"{SCRAPE_SECONDS}s"
    return {
        # Rules are evaluated as often as series are scraped, so an alert fires within seconds of its cause.
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "rule_files": [f"{_RULES_DIR}/*.yaml"],
        "scrape_configs": [
            _scrape_job("triton", {"pod_container_port_number": str(METRICS_PORT)}, "/metrics"),
            _scrape_job(
                "trtllm-serve",
                {
                    "pod_container_name": TRTLLM_SERVE_CONTAINER,
                    "pod_container_port_number": str(HTTP_PORT),
                },
                TRTLLM_SERVE_METRICS_PATH,
            ),
            _operator_job(),
        ],
    }


def alert_rules(repo_root: Path) -> str:
    """The chart's alerting rules file, as the checkout holds it."""
    return (repo_root / ALERT_RULES).read_text()


# -- manifests ----------------------------------------------------------------------------------------


def _account(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NAMESPACE}}


def _subject(name: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}


def _role_ref(kind: str, name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}


def _cluster_binding(name: str, role: str, account: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": _role_ref("ClusterRole", role),
        "subjects": [_subject(account)],
    }


def _read_role(name: str, resources: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": resources, "verbs": ["get", "list", "watch"]}],
    }


def _container_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": _NOBODY,
        "runAsGroup": _NOBODY,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _deployment(name: str, container: dict[str, Any], volumes: list[dict[str, Any]]) -> dict[str, Any]:
    selector = {_APP: name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": selector},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "serviceAccountName": name,
                    "nodeSelector": _REAL_NODES,
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{**container, "name": name, "securityContext": _container_security()}],
                    "volumes": volumes,
                },
            },
        },
    }


def _service(name: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {_APP: name}},
        "spec": {"selector": {_APP: name}, "ports": [{"name": "web", "port": port, "targetPort": port}]},
    }


def prometheus_objects(image: str, rules: str) -> list[dict[str, Any]]:
    """Prometheus: ServiceAccount (reads pods only), configuration, alerting `rules`, Deployment, Service."""
    container = {
        "image": image,
        "imagePullPolicy": "Never",
        "args": [
            "--config.file=/etc/prometheus/prometheus.yml",
            "--storage.tsdb.path=/prometheus",
            "--storage.tsdb.retention.time=2h",
            f"--web.listen-address=:{PROMETHEUS_PORT}",
        ],
        "ports": [{"name": "web", "containerPort": PROMETHEUS_PORT}],
        "readinessProbe": {"httpGet": {"path": "/-/ready", "port": PROMETHEUS_PORT}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "512Mi"}},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/prometheus", "readOnly": True},
            {"name": "rules", "mountPath": _RULES_DIR, "readOnly": True},
            {"name": "data", "mountPath": "/prometheus"},
        ],
    }
    config = yaml.safe_dump(prometheus_config(), sort_keys=False)
    rules_map = f"{PROMETHEUS}-rules"
    deployment = _deployment(
        PROMETHEUS,
        container,
        [
            {"name": "config", "configMap": {"name": PROMETHEUS}},
            {"name": "rules", "configMap": {"name": rules_map}},
            {"name": "data", "emptyDir": {}},
        ],
    )
    # Prometheus reads both at start only: a changed configuration or rule file rolls its pod.
    digest = hashlib.sha256(f"{config}\0{rules}".encode()).hexdigest()[:16]
    deployment["spec"]["template"]["metadata"]["annotations"] = {"mmd.local/config-digest": digest}
    return [
        _account(PROMETHEUS),
        _read_role("mmd-local:prometheus", ["pods"]),
        _cluster_binding("mmd-local:prometheus", "mmd-local:prometheus", PROMETHEUS),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": PROMETHEUS, "namespace": NAMESPACE},
            "data": {"prometheus.yml": config},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": rules_map, "namespace": NAMESPACE},
            "data": {ALERT_RULES.name: rules},
        },
        deployment,
        _service(PROMETHEUS, PROMETHEUS_PORT),
    ]


def adapter_service_name() -> str:
    """The DNS name the API server verifies the adapter's serving certificate against."""
    return f"{ADAPTER}.{NAMESPACE}.svc"


def adapter_objects(image: str, serving: tuple[bytes, bytes], ca_bundle: bytes) -> list[dict[str, Any]]:
    """prometheus-adapter's objects, the APIService last.

    Its RBAC (delegated authentication and authorization, reading the objects it maps series to), its
    serving certificate, rules, Deployment and Service.
    """
    cert, key = serving
    container = {
        "image": image,
        "imagePullPolicy": "Never",
        "args": [
            f"--secure-port={ADAPTER_PORT}",
            "--tls-cert-file=/var/run/serving-cert/tls.crt",
            "--tls-private-key-file=/var/run/serving-cert/tls.key",
            "--config=/etc/adapter/config.yaml",
            f"--prometheus-url=http://{PROMETHEUS}.{NAMESPACE}.svc:{PROMETHEUS_PORT}/",
            f"--metrics-relist-interval={RELIST_SECONDS}s",
            # The series discovery looks back this far: a pod scraped once within it is listed.
            f"--metrics-max-age={3 * RELIST_SECONDS}s",
            "--v=2",
        ],
        "ports": [{"name": "https", "containerPort": ADAPTER_PORT}],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": ADAPTER_PORT, "scheme": "HTTPS"},
            "periodSeconds": 2,
        },
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [
            {"name": "serving-cert", "mountPath": "/var/run/serving-cert", "readOnly": True},
            {"name": "config", "mountPath": "/etc/adapter", "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    return [
        _account(ADAPTER),
        # Reads the pods and namespaces the rules map series to.
        _read_role("mmd-local:prometheus-adapter", ["namespaces", "pods"]),
        _cluster_binding("mmd-local:prometheus-adapter", "mmd-local:prometheus-adapter", ADAPTER),
        # Delegated authentication (TokenReviews) and authorization (SubjectAccessReviews).
        _cluster_binding("mmd-local:prometheus-adapter:auth-delegator", "system:auth-delegator", ADAPTER),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "mmd-local:prometheus-adapter:auth-reader", "namespace": "kube-system"},
            "roleRef": _role_ref("Role", "extension-apiserver-authentication-reader"),
            "subjects": [_subject(ADAPTER)],
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{ADAPTER}-serving", "namespace": NAMESPACE},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": base64.b64encode(cert).decode(), "tls.key": base64.b64encode(key).decode()},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": ADAPTER, "namespace": NAMESPACE},
            "data": {"config.yaml": scaling_metrics.adapter_config_yaml()},
        },
        _deployment(
            ADAPTER,
            container,
            [
                {"name": "serving-cert", "secret": {"secretName": f"{ADAPTER}-serving"}},
                {"name": "config", "configMap": {"name": ADAPTER}},
                {"name": "tmp", "emptyDir": {}},
            ],
        ),
        _service(ADAPTER, ADAPTER_PORT),
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": {
                "group": CUSTOM_METRICS_GROUP,
                "version": CUSTOM_METRICS_VERSION,
                "service": {"name": ADAPTER, "namespace": NAMESPACE, "port": ADAPTER_PORT},
                "caBundle": base64.b64encode(ca_bundle).decode(),
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    ]


def objects(credentials: Credentials, names: dict[str, str], rules: str) -> list[dict[str, Any]]:
    """Everything `up --metrics` applies, in order; issues the adapter's serving certificate.

    Prometheus evaluates the alerting `rules` (`alert_rules`).
    """
    cert, key = issue_certificate(
        credentials, ADAPTER, common_name=adapter_service_name(), dns_names=(f"{ADAPTER}.{NAMESPACE}",)
    )
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    return [
        namespace,
        *prometheus_objects(names[PROMETHEUS], rules),
        *adapter_objects(
            names[ADAPTER], (cert.read_bytes(), key.read_bytes()), credentials.ca_cert.read_bytes()
        ),
    ]


# -- readiness ----------------------------------------------------------------------------------------


def apiservice_condition(api_client: k8s.ApiClient) -> tuple[bool, str]:
    """Whether the custom-metrics APIService is Available, and its condition's reason and message."""
    registration = k8s.ApiregistrationV1Api(api_client)
    try:
        service: Any = registration.read_api_service(APISERVICE)
    except ApiException as error:
        if error.status == 404:
            return False, "not registered"
        raise
    for condition in service.status.conditions or [] if service.status else []:
        if condition.type == "Available":
            return condition.status == "True", f"{condition.reason}: {condition.message or ''}".strip()
    return False, "no Available condition yet"


def wait_apiservice(api_client: k8s.ApiClient, timeout: float, sleep: Callable[[float], None]) -> float:
    """Wait until the API server reaches the adapter; return the seconds waited."""
    started = time.monotonic()
    last = ""
    while time.monotonic() - started < timeout:
        available, last = apiservice_condition(api_client)
        if available:
            return time.monotonic() - started
        sleep(0.5)
    raise TimeoutError(f"APIService {APISERVICE} not Available after {timeout:.0f} s ({last})")
