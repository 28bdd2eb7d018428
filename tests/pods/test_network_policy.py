"""`serving.networkPolicy` enforced by a real NetworkPolicy implementation (kube-router on every node).

The operator's policy lets only the named clients reach the inference ports, only the monitoring
namespaces reach the metrics port, and the serving pods reach only DNS and the egress allowlist. Every
connection here is between pods on the cluster's private network; the targets of egress are busybox web
servers in another namespace.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mmd_testbed.localcluster import addons
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.nodebinaries import ensure_node_binaries
from tests.support.kube import POD_SECURITY, Kube, Resources, Tools
from tests.support.pods import client_pod, example, http_get, pod_connects, serving_pods, web_pod

pytestmark = pytest.mark.pods
TARGET_PORT = 8080


@pytest.fixture(scope="module")
def busybox() -> str:
    return addons.image_names(ensure_node_binaries(Layout.discover(), say=print))["busybox"]


@pytest.fixture
def other_namespace(kube: Kube) -> Iterator[str]:
    """A second namespace: the monitoring one here, also home of the egress targets."""
    name = f"monitoring-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace(
        {"metadata": {"name": name, "labels": {"mmd.test/monitoring": name, **POD_SECURITY}}}
    )
    kube.wait_for(
        f"serviceaccount default in {name}",
        lambda: kube.core.read_namespaced_service_account("default", name),
    )
    yield name
    kube.core.delete_namespace(name, propagation_policy="Background")


def test_the_network_policy_is_enforced_for_clients_metrics_and_egress(
    resources: Resources, kube: Kube, tools: Tools, namespace: str, other_namespace: str, busybox: str
) -> None:
    allowed_target = web_pod(kube, other_namespace, "allowed-target", busybox, TARGET_PORT, {"app": "target"})
    other_target = web_pod(kube, other_namespace, "other-target", busybox, TARGET_PORT, {"app": "target"})
    policy: dict[str, Any] = {
        "clients": [{"podSelector": {"matchLabels": {"app": "chat"}}}],
        "monitoringNamespaceSelector": {"matchLabels": {"mmd.test/monitoring": other_namespace}},
        "egress": [{"cidr": f"{allowed_target}/32", "ports": [{"port": TARGET_PORT}]}],
    }
    resources.apply(example("llava", serving={"networkPolicy": policy}))
    resources.wait_phase("llava", "Ready", timeout=240)
    client_pod(kube, namespace, "chat", busybox, labels={"app": "chat"})
    client_pod(kube, namespace, "stranger", busybox)
    client_pod(kube, other_namespace, "prometheus", busybox)
    service = f"llava.{namespace}.svc.cluster.local"
    # kube-router programs a policy within moments of seeing a pod; give it a few.
    deadline = time.monotonic() + 20
    while "200 OK" not in http_get(tools, namespace, "chat", service, 8000, "/v2/health/ready"):
        assert time.monotonic() < deadline, "the allowed client never got an answer"
        time.sleep(1)

    results = {
        "chat -> 8000 (inference)": http_get(tools, namespace, "chat", service, 8000, "/v2/health/ready"),
        "stranger -> 8000 (inference)": http_get(
            tools, namespace, "stranger", service, 8000, "/v2/health/ready"
        ),
        "monitoring -> 8002 (metrics)": http_get(
            tools, other_namespace, "prometheus", service, 8002, "/metrics"
        ),
        "chat -> 8002 (metrics)": http_get(tools, namespace, "chat", service, 8002, "/metrics"),
        "monitoring -> 8000 (inference)": http_get(
            tools, other_namespace, "prometheus", service, 8000, "/v2/health/ready"
        ),
    }
    (pod,) = serving_pods(kube, namespace, "llava")
    name = pod.metadata.name
    egress = {
        "serving -> allowlisted pod": pod_connects(
            tools, namespace, name, "tritonserver", allowed_target, TARGET_PORT
        ),
        "serving -> other pod": pod_connects(
            tools, namespace, name, "tritonserver", other_target, TARGET_PORT
        ),
        "serving -> DNS (CoreDNS in kube-system)": pod_connects(
            tools, namespace, name, "tritonserver", "kube-dns.kube-system.svc.cluster.local", 53
        ),
    }
    report = "\n".join(f"  {case}: {answer or 'no answer'}" for case, answer in {**results, **egress}.items())
    print(f"\nNetworkPolicy enforced by kube-router:\n{report}")
    assert "200 OK" in results["chat -> 8000 (inference)"], report
    assert results["stranger -> 8000 (inference)"] == "", report
    assert "200 OK" in results["monitoring -> 8002 (metrics)"], report
    assert results["chat -> 8002 (metrics)"] == "", report
    assert results["monitoring -> 8000 (inference)"] == "", report
    assert egress == {
        "serving -> allowlisted pod": True,
        "serving -> other pod": False,
        "serving -> DNS (CoreDNS in kube-system)": True,
    }, report
    # The kubelet's probes still reach the pod: it stays ready, never restarted.
    status = kube.core.read_namespaced_pod(name, namespace).status.container_statuses[0]
    assert status.ready and status.restart_count == 0
