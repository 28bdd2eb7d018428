"""`spec.serving.networkPolicy` on the real control plane: the operator creates the NetworkPolicy with
exactly the rules the spec asks for and a controller reference to the resource, updates it when the
section changes, deletes it when the section is removed, and the garbage collector takes it with the
resource.

What is not tested here, because the local cluster has no network plugin that enforces NetworkPolicy
(kwok plays the pods; nothing routes traffic between them): that the rules actually block and admit
traffic. The API server admits and stores the policy, which is as far as this tier can go.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from mmd_testbed.localcluster.cluster import LocalCluster
from tests.support.kube import Kube, Resources, read_or_none

from .conftest import operator_writes_at_rest

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llava_onevision.yaml"
NAME = "llava-onevision"
POLICY = {
    "clients": [
        {"podSelector": {"matchLabels": {"app": "chat"}}},
        {
            "podSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["api"]}]},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "apps"}},
        },
    ],
    "monitoringNamespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
    "egress": [
        {"cidr": "203.0.113.0/24", "ports": [{"port": 443}, {"port": 8000, "endPort": 8080}]},
        {"cidr": "0.0.0.0/0", "exceptCidrs": ["10.0.0.0/8", "169.254.169.254/32"]},
    ],
}
DNS = {
    "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}],
    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
}
EXPECTED_SPEC = {
    "podSelector": {
        "matchLabels": {
            "app.kubernetes.io/component": "serving",
            "app.kubernetes.io/instance": NAME,
            "app.kubernetes.io/managed-by": "mmd-operator",
        }
    },
    "policyTypes": ["Ingress", "Egress"],
    "ingress": [
        {
            "from": [
                {"podSelector": {"matchLabels": {"app": "chat"}}},
                {
                    "podSelector": {
                        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["api"]}]
                    },
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "apps"}},
                },
            ],
            "ports": [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 8001}],
        },
        {
            "from": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}}
            ],
            "ports": [{"protocol": "TCP", "port": 8002}],
        },
    ],
    "egress": [
        DNS,
        {
            "to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}],
            "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 8000, "endPort": 8080}],
        },
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "169.254.169.254/32"]}}]},
    ],
}


@pytest.fixture
def networking(api_client: k8s.ApiClient) -> Any:
    return k8s.NetworkingV1Api(api_client)


def _document(policy: dict[str, Any] | None) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    serving = document["spec"].setdefault("serving", {})
    serving["imageUrlInput"] = True  # the case the egress allowlist is for
    if policy is not None:
        serving["networkPolicy"] = copy.deepcopy(policy)
    return document


def _policy(networking: Any, namespace: str) -> dict[str, Any] | None:
    return read_or_none(networking.read_namespaced_network_policy, NAME, namespace)


def _admits_every_namespace(networking: Any, namespace: str) -> bool:
    policy = _policy(networking, namespace)
    return policy is not None and {"namespaceSelector": {}} in policy["spec"]["ingress"][0]["from"]


def _gone(networking: Any, namespace: str) -> bool:
    return _policy(networking, namespace) is None


def test_the_operator_creates_updates_and_deletes_the_serving_pods_network_policy(
    kube: Kube, resources: Resources, namespace: str, networking: Any, local_cluster: LocalCluster
) -> None:
    resources.apply(_document(POLICY))
    policy = kube.wait_for("the NetworkPolicy", lambda: _policy(networking, namespace))
    assert policy["spec"] == EXPECTED_SPEC
    assert policy["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "serving.multimodal.dev/v1alpha1",
            "kind": "MultimodalDeployment",
            "name": NAME,
            "uid": resources.get(NAME)["metadata"]["uid"],
            "controller": True,
        }
    ]
    assert policy["metadata"]["labels"]["app.kubernetes.io/instance"] == NAME
    # It selects exactly the pods of the Deployment, which still comes up (nothing enforces it here).
    ready = resources.wait_phase(NAME, "Ready")
    deployment = kube.apps.read_namespaced_deployment(NAME, namespace)
    assert policy["spec"]["podSelector"]["matchLabels"] == deployment.spec.selector.match_labels
    pods = kube.core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=serving")
    selected = deployment.spec.selector.match_labels.items()
    assert pods.items and all(selected <= (p.metadata.labels or {}).items() for p in pods.items)

    # At rest, the policy is not written again (the digest stamped on it matches what is wanted).
    writes = operator_writes_at_rest(local_cluster.audit_log, namespace, 10)
    assert writes == [], json.dumps(writes, indent=1)[:3000]

    # A change of the section changes the policy, and nothing else is rolled.
    wider = {**POLICY, "clients": [*POLICY["clients"], {"namespaceSelector": {}}]}
    resources.apply(_document(wider))
    kube.wait_for(
        "the NetworkPolicy to admit every namespace", lambda: _admits_every_namespace(networking, namespace)
    )
    after = resources.wait_phase(NAME, "Ready")
    assert after["status"]["modelRepository"] == ready["status"]["modelRepository"]

    # Removing the section deletes the policy; the rest stays.
    resources.apply(_document(None))
    kube.wait_for("the NetworkPolicy to be deleted", lambda: _gone(networking, namespace))
    resources.wait_phase(NAME, "Ready")
    assert kube.apps.read_namespaced_deployment(NAME, namespace)
    assert kube.core.read_namespaced_service(NAME, namespace)

    # Back again, and gone with the resource: the garbage collector follows the owner reference.
    resources.apply(_document(POLICY))
    kube.wait_for("the NetworkPolicy again", lambda: _policy(networking, namespace))
    resources.delete(NAME)
    kube.wait_for("the NetworkPolicy to go with the resource", lambda: _gone(networking, namespace))


def test_a_resource_without_the_section_gets_no_policy(
    kube: Kube, resources: Resources, namespace: str, networking: Any
) -> None:
    resources.apply(_document(None))
    resources.wait_phase(NAME, "Ready")
    assert networking.list_namespaced_network_policy(namespace).items == []
