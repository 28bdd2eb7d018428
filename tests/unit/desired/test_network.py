"""The serving pods' NetworkPolicy (`spec.serving.networkPolicy`): the object itself, when it is applied,
when it is deleted, and the spec rules around it. Enforcement needs a network plugin; see the README."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.desired import network
from mmd_operator.desired.decision import manifests
from mmd_operator.facts import Meta, Missing, MissingReference, OwnerRef
from mmd_operator.vocabulary import hashing
from mmd_operator.vocabulary.ownership import ObjectKey
from tests.support.decisions import CONFIG, ME, OTHER, decide, example, kinds
from tests.support.invalid_specs import problems_of, resource

POLICY = {
    "clients": [
        {"podSelector": {"matchLabels": {"app": "chat"}}},
        {"namespaceSelector": {"matchLabels": {"team": "vision"}}},
        {
            "podSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["api", "ui"]}]},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "apps"}},
        },
    ],
    "monitoringNamespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
    "egress": [
        {"cidr": "203.0.113.0/24", "ports": [{"port": 443}]},
        {
            "cidr": "0.0.0.0/0",
            "exceptCidrs": ["10.0.0.0/8", "169.254.169.254/32"],
            "ports": [{"port": 8000, "endPort": 8080}, {"port": 53, "protocol": "UDP"}],
        },
    ],
}


def _policy(**spec_changes: Any) -> dict[str, Any]:
    resource_, _ = example("llava_onevision", serving__networkPolicy=POLICY, **spec_changes)
    built = network.network_policy(resource_, namespace="ml", owner=OwnerRef("llava_onevision", "uid-1"))
    assert built is not None
    return built


def test_no_section_no_policy() -> None:
    resource_, plan = example("llava")
    assert network.network_policy(resource_, namespace="ml", owner=ME) is None
    assert "NetworkPolicy" not in [m["kind"] for m in manifests(resource_, plan, config=CONFIG)]


def test_the_policy_selects_the_serving_pods_and_is_owned_by_the_resource_alone() -> None:
    resource_, plan = example("llava", serving__networkPolicy=POLICY)
    built = network.network_policy(resource_, namespace="ml", owner=ME)
    assert built is not None
    deployment = next(m for m in manifests(resource_, plan, config=CONFIG) if m["kind"] == "Deployment")
    assert built["metadata"]["name"] == deployment["metadata"]["name"] == "llava"
    assert built["metadata"]["namespace"] == "ml"
    assert built["spec"]["podSelector"] == deployment["spec"]["selector"]
    assert built["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "mmd-operator"
    assert built["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "serving.multimodal.dev/v1alpha1",
            "kind": "MultimodalDeployment",
            "name": "llava",
            "uid": ME.uid,
            "controller": True,
        }
    ]
    assert built["spec"]["policyTypes"] == ["Ingress", "Egress"]


def test_ingress_inference_ports_from_the_clients_and_metrics_from_monitoring_only() -> None:
    assert _policy()["spec"]["ingress"] == [
        {
            "from": [
                {"podSelector": {"matchLabels": {"app": "chat"}}},
                {"namespaceSelector": {"matchLabels": {"team": "vision"}}},
                {
                    "podSelector": {
                        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["api", "ui"]}]
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
    ]


def test_egress_is_dns_and_the_allowlist_only() -> None:
    assert _policy()["spec"]["egress"] == [
        {
            "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
        },
        {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}], "ports": [{"protocol": "TCP", "port": 443}]},
        {
            "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "169.254.169.254/32"]}}],
            "ports": [{"protocol": "TCP", "port": 8000, "endPort": 8080}, {"protocol": "UDP", "port": 53}],
        },
    ]


def test_an_empty_section_denies_everything_but_metrics_from_monitoring_and_dns() -> None:
    resource_, _ = example("llava", serving__networkPolicy={})
    built = network.network_policy(resource_, namespace="ml", owner=ME)
    assert built is not None
    # No ingress rule for HTTP and gRPC at all: a rule without `from` would admit every pod.
    assert built["spec"]["ingress"] == [
        {
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
            "ports": [{"protocol": "TCP", "port": 8002}],
        }
    ]
    assert [rule["ports"] for rule in built["spec"]["egress"]] == [
        [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    ]


def test_an_empty_selector_stays_empty_and_selects_everything() -> None:
    resource_, _ = example("llava", serving__networkPolicy={"clients": [{"namespaceSelector": {}}]})
    built = network.network_policy(resource_, namespace="ml", owner=ME)
    assert built is not None
    assert built["spec"]["ingress"][0]["from"] == [{"namespaceSelector": {}}]


def test_the_policy_parses_into_the_kubernetes_clients_model_and_back_unchanged() -> None:
    built = _policy()
    api = k8s.ApiClient()
    assert api.sanitize_for_serialization(k8s.V1NetworkPolicy.from_dict(built)) == built


def test_the_policy_is_among_the_rendered_manifests() -> None:
    resource_, plan = example("llava", serving__networkPolicy=POLICY)
    assert [m["kind"] for m in manifests(resource_, plan, config=CONFIG)][-2:] == ["Service", "NetworkPolicy"]


# -- decisions -----------------------------------------------------------------------------------


def _live(owner: OwnerRef = ME, **more: Any) -> Meta:
    return Meta(name="llava", uid="uid-policy", owners=(owner,), **more)


def test_a_section_applies_the_policy_from_the_start_like_the_service() -> None:
    resource_, plan = example("llava", serving__networkPolicy=POLICY)
    decision = decide(resource_, plan)
    assert kinds(decision) == ["ConfigMap", "Job", "NetworkPolicy", "Service"]
    applied = decision.manifest("NetworkPolicy")
    assert applied is not None
    assert applied == hashing.stamped(network.network_policy(resource_, namespace="ml", owner=ME) or {})
    assert decision.delete == ()


def test_removing_the_section_deletes_the_policy_the_resource_owns() -> None:
    resource_, plan = example("llava")
    decision = decide(resource_, plan, network_policy=_live())
    assert "NetworkPolicy" not in kinds(decision)
    assert decision.delete == (ObjectKey("networking.k8s.io/v1", "NetworkPolicy", "llava"),)


@pytest.mark.parametrize(
    "live", [_live(owner=OTHER), _live(deleting=True), Meta(name="llava", uid="uid-policy")], ids=str
)
def test_a_policy_it_does_not_own_or_that_is_going_is_left_alone(live: Meta) -> None:
    resource_, plan = example("llava")
    assert decide(resource_, plan, network_policy=live).delete == ()


def test_while_a_missing_secret_holds_everything_back_no_policy_is_created() -> None:
    resource_, plan = example("mllama", serving__networkPolicy=POLICY)
    missing = MissingReference(Missing.SECRET, "spec.model.source.huggingface.tokenSecretRef", "missing")
    decision = decide(resource_, plan, claim=None, missing=(missing,))
    assert decision.apply == ()


# -- spec rules (offline; the cluster tier checks the same CEL on the API server) -----------------


def _problems(policy: dict[str, Any], model: str = "llava") -> list[str]:
    return problems_of(resource(model, {"spec": {"serving": {"networkPolicy": policy}}}))


def test_the_example_section_is_valid_for_every_type() -> None:
    assert _problems(POLICY) == []
    assert _problems(POLICY, "whisper") == []
    document = resource("qwen2_vl", {"spec": {"serving": {"networkPolicy": POLICY, "imageUrlInput": True}}})
    assert problems_of(document) == []
    assert MultimodalDeployment.model_validate(document).spec.serving.image_url_input is True


@pytest.mark.parametrize(
    ("policy", "field", "fragment"),
    [
        ({"clients": [{}]}, "spec.serving.networkPolicy.clients[0]", "a podSelector, a namespaceSelector"),
        (
            {"egress": [{"cidr": "10.0.0.0"}]},
            "spec.serving.networkPolicy.egress[0].cidr",
            "must match pattern",
        ),
        ({"egress": [{"cidr": "10.0.0.0/33"}]}, "spec.serving.networkPolicy.egress[0].cidr", "must match"),
        (
            {"egress": [{"cidr": "0.0.0.0/0", "ports": [{"port": 9000, "endPort": 8000}]}]},
            "spec.serving.networkPolicy.egress[0].ports[0].endPort",
            "endPort (8000) must not be below port (9000)",
        ),
        (
            {"egress": [{"cidr": "0.0.0.0/0", "ports": [{"port": 443, "protocol": "ICMP"}]}]},
            "spec.serving.networkPolicy.egress[0].ports[0].protocol",
            "must be 'TCP', 'UDP' or 'SCTP'",
        ),
        (
            {"clients": [{"podSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}}]},
            "spec.serving.networkPolicy.clients[0].podSelector.matchExpressions[0].operator",
            "must be",
        ),
    ],
)
def test_malformed_sections_are_refused_with_the_field(
    policy: dict[str, Any], field: str, fragment: str
) -> None:
    problems = _problems(policy)
    assert any(p.startswith(f"{field}:") and fragment in p for p in problems), problems
