"""`spec.serving.autoscaling` on the real control plane: the HorizontalPodAutoscaler and PodDisruptionBudget
the operator owns, and who owns the serving Deployment's `replicas`.

The autoscaler's writes are real in two ways: a patch of the Deployment's scale subresource under a field
manager of its own (what the HPA controller's write looks like to the API server), and the controller
manager's own HPA controller, which raises the Deployment to `minReplicas` without reading any metric. After
each, a change of the spec makes the operator apply the Deployment again, and `replicas` must stay where the
autoscaler put it; server-side apply's managedFields say who owns the field. Turning autoscaling off gives the
field back to the operator. The metric itself is not served here (no custom metrics API in this tier), so
the autoscaler reports that it cannot read it, and the status says so.
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
from tests.support.kube import Kube, Resources, Tools, read_or_none

from .conftest import operator_writes_at_rest

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llava.yaml"
NAME = "llava"
OPERATOR = ("mmd-operator", "Apply", "")
HANDOVER = ("mmd-operator-handover", "Apply", "")
# The HPA controller's writes, as the API server records them: an update of the scale subresource by the
# controller manager.
HPA_CONTROLLER = ("kube-controller-manager", "Update", "scale")
AUTOSCALER = "test-autoscaler"
AUTOSCALING = {
    "minReplicas": 1,
    "maxReplicas": 4,
    "metric": {"name": "QueueTimePerRequest", "target": 200},
    "scaleDownStabilizationSeconds": 600,
}
SELECTOR = {
    "app.kubernetes.io/component": "serving",
    "app.kubernetes.io/instance": NAME,
    "app.kubernetes.io/managed-by": "mmd-operator",
}


@pytest.fixture
def autoscaling_api(api_client: k8s.ApiClient) -> Any:
    return k8s.AutoscalingV2Api(api_client)


@pytest.fixture
def policy_api(api_client: k8s.ApiClient) -> Any:
    return k8s.PolicyV1Api(api_client)


def _document(**serving: Any) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    document["spec"]["serving"] = copy.deepcopy(serving)
    return document


def _read(read: Any, namespace: str) -> dict[str, Any] | None:
    return read_or_none(read, NAME, namespace)


def _deployment(kube: Kube, namespace: str) -> dict[str, Any]:
    found = _read(kube.apps.read_namespaced_deployment, namespace)
    assert found is not None
    return found


def _replicas_owners(deployment: dict[str, Any]) -> set[tuple[str, str, str]]:
    """Who owns spec.replicas: (manager, operation, subresource), the manager's user-agent suffix cut."""
    return {
        (str(entry["manager"]).split("/")[0], str(entry["operation"]), str(entry.get("subresource", "")))
        for entry in deployment["metadata"].get("managedFields") or []
        if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
    }


def _condition(resources: Resources, kind: str) -> dict[str, Any]:
    return resources.condition(NAME, kind)


def _rolled_to_new_repository(resources: Resources, before: str) -> dict[str, Any] | None:
    """The resource once it is Ready on a repository other than `before` (a Deployment apply happened)."""
    body = resources.get(NAME)
    status = body.get("status") or {}
    current = status.get("observedGeneration") == body["metadata"]["generation"]
    ready = current and status.get("phase") == "Ready" and status.get("modelRepository") != before
    return body if ready else None


def test_the_autoscaler_owns_replicas_while_autoscaling_is_on_and_the_operator_takes_them_back_after(
    kube: Kube,
    resources: Resources,
    namespace: str,
    autoscaling_api: Any,
    policy_api: Any,
    local_cluster: LocalCluster,
    tools: Tools,
) -> None:
    # Two fixed replicas: the operator owns the field; two pods can run, so a disruption budget guards them.
    resources.apply(_document(replicas=2))
    resources.wait_phase(NAME, "Ready", timeout=90)
    deployment = _deployment(kube, namespace)
    assert deployment["spec"]["replicas"] == 2 and _replicas_owners(deployment) == {OPERATOR}
    budget = kube.wait_for(
        "the PodDisruptionBudget", lambda: _read(policy_api.read_namespaced_pod_disruption_budget, namespace)
    )
    assert budget["spec"]["maxUnavailable"] == 1 and budget["spec"]["selector"] == {"matchLabels": SELECTOR}
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert deployment["spec"]["selector"]["matchLabels"] == SELECTOR
    assert _read(autoscaling_api.read_namespaced_horizontal_pod_autoscaler, namespace) is None

    # Autoscaling on (replicas left out, so the stored default 1): the HPA appears, and the Deployment keeps
    # its two pods: the operator handed the field over before its apply left it out.
    resources.apply(_document(autoscaling=AUTOSCALING))
    hpa = kube.wait_for(
        "the HorizontalPodAutoscaler",
        lambda: _read(autoscaling_api.read_namespaced_horizontal_pod_autoscaler, namespace),
    )
    assert hpa["metadata"]["ownerReferences"][0]["name"] == NAME
    assert hpa["metadata"]["ownerReferences"][0]["controller"] is True
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 4)
    assert spec["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                # No metric selector: the adapter's query picks the models (every queue, the entry
                # models' requests).
                "metric": {"name": "mmd_triton_queue_time_per_request_seconds"},
                "target": {"type": "AverageValue", "averageValue": "200m"},
            },
        }
    ]
    assert spec["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 600

    def handed_over() -> dict[str, Any] | None:
        found = _deployment(kube, namespace)
        return found if OPERATOR not in _replicas_owners(found) else None

    deployment = kube.wait_for("the operator to let go of replicas", handed_over)
    assert deployment["spec"]["replicas"] == 2, "the Deployment fell back to its default on the hand-over"
    assert _replicas_owners(deployment) == {HANDOVER}

    # The controller manager's HPA controller cannot read the metric here, and the status says so in words.
    def autoscaling_condition() -> dict[str, Any] | None:
        condition = _condition(resources, "Autoscaling")
        return condition if condition.get("status") == "False" else None

    condition = kube.wait_for("the Autoscaling condition", autoscaling_condition, timeout=60)
    assert condition["reason"] == "FailedGetPodsMetric"
    assert condition["message"].startswith(
        f"the HorizontalPodAutoscaler {NAME} cannot read the queue time per request "
        "(mmd_triton_queue_time_per_request_seconds) of the serving pods, so it does not scale: the custom "
        "metrics API must be served (prometheus-adapter with the rules in docs/autoscaling.md)"
    ), condition["message"]
    # ... followed by the controller's own words.
    assert "; it says: " in condition["message"]
    assert "unable to get metric mmd_triton_queue_time_per_request_seconds" in condition["message"], (
        condition["message"]
    )
    print(f"\nAutoscaling condition without a metrics source: {condition['message']}")
    status = resources.get(NAME)["status"]
    assert status["phase"] == "Ready" and status["replicas"] == 2
    assert status["autoscaling"]["horizontalPodAutoscaler"] == NAME
    assert status["autoscaling"]["metric"] == "mmd_triton_queue_time_per_request_seconds"

    # `kubectl scale mmd` would fight the autoscaler: refused, with the values.
    refused = tools.run("kubectl", "scale", "mmd", NAME, "-n", namespace, "--replicas=3", check=False)
    assert refused.returncode != 0
    assert (
        "spec.serving.replicas: Forbidden: serving.replicas (3) cannot be set together with "
        "serving.autoscaling: the HorizontalPodAutoscaler sets the number of serving pods itself, between "
        "minReplicas (1) and maxReplicas (4)"
    ) in refused.stderr, refused.stderr

    # At rest the operator writes nothing, the HPA and the PDB included.
    writes = operator_writes_at_rest(local_cluster.audit_log, namespace, 10)
    assert writes == [], json.dumps(writes, indent=1)[:3000]

    # An autoscaler's write through the scale subresource, then a change that makes the operator apply the
    # Deployment again: the autoscaler's number stays.
    kube.apps.patch_namespaced_deployment_scale(
        NAME, namespace, {"spec": {"replicas": 3}}, field_manager=AUTOSCALER
    )
    before = resources.get(NAME)["status"]["modelRepository"]
    resources.apply(_document(autoscaling=AUTOSCALING, streaming=True))
    rolled = kube.wait_for(
        "the rollout of the streaming repository",
        lambda: _rolled_to_new_repository(resources, before),
        timeout=120,
    )
    deployment = _deployment(kube, namespace)
    assert deployment["spec"]["replicas"] == 3
    assert _replicas_owners(deployment) == {(AUTOSCALER, "Update", "scale")}
    assert (
        deployment["spec"]["template"]["metadata"]["annotations"]["serving.multimodal.dev/model-repository"]
        == (rolled["status"]["modelRepository"])
    )
    kube.wait_for(
        "status.replicas to follow the autoscaler", lambda: resources.get(NAME)["status"]["replicas"] == 3
    )

    # The real HPA controller: below minReplicas it scales up without any metric.
    resources.apply(_document(autoscaling={**AUTOSCALING, "minReplicas": 4}, streaming=True))

    def raised_by_the_hpa_controller() -> dict[str, Any] | None:
        found = _deployment(kube, namespace)
        return found if found["spec"]["replicas"] == 4 else None

    deployment = kube.wait_for(
        "the HPA controller to scale to minReplicas", raised_by_the_hpa_controller, timeout=90
    )
    assert _replicas_owners(deployment) == {HPA_CONTROLLER}
    before = resources.get(NAME)["status"]["modelRepository"]
    resources.apply(_document(autoscaling={**AUTOSCALING, "minReplicas": 4}))
    kube.wait_for("the rollout back", lambda: _rolled_to_new_repository(resources, before), timeout=120)
    deployment = _deployment(kube, namespace)
    assert deployment["spec"]["replicas"] == 4 and _replicas_owners(deployment) == {HPA_CONTROLLER}
    status = kube.wait_for(
        "the status to show the autoscaler's four pods",
        lambda: (lambda s: s if s.get("replicas") == 4 and s.get("readyReplicas") == 4 else None)(
            resources.get(NAME)["status"]
        ),
        timeout=60,
    )
    assert status["autoscaling"]["desiredReplicas"] == 4
    kube.events_about(
        namespace,
        NAME,
        "Autoscaled",
        containing=(
            f"scaled the serving pods up from 3 to 4 (HorizontalPodAutoscaler {NAME} on "
            "mmd_triton_queue_time_per_request_seconds)"
        ),
    )

    # Autoscaling off, two replicas: the autoscaler goes and the operator owns replicas again.
    resources.apply(_document(replicas=2))
    kube.wait_for(
        "the HorizontalPodAutoscaler to be deleted",
        lambda: _read(autoscaling_api.read_namespaced_horizontal_pod_autoscaler, namespace) is None,
    )

    def taken_back() -> dict[str, Any] | None:
        found = _deployment(kube, namespace)
        return found if found["spec"]["replicas"] == 2 and _replicas_owners(found) == {OPERATOR} else None

    kube.wait_for("the operator to own replicas again", taken_back)
    resources.wait_phase(NAME, "Ready")
    assert "Autoscaling" not in {c["type"] for c in resources.get(NAME)["status"]["conditions"]}
    assert "autoscaling" not in resources.get(NAME)["status"]

    # The scale subresource works again, and one replica needs no disruption budget.
    tools.run("kubectl", "scale", "mmd", NAME, "-n", namespace, "--replicas=1")
    kube.wait_for(
        "the Deployment at one replica", lambda: _deployment(kube, namespace)["spec"]["replicas"] == 1
    )
    kube.wait_for(
        "the PodDisruptionBudget to be deleted",
        lambda: _read(policy_api.read_namespaced_pod_disruption_budget, namespace) is None,
    )
    assert resources.get(NAME)["spec"]["serving"]["replicas"] == 1


def test_created_with_autoscaling_the_deployment_starts_without_replicas_and_the_hpa_raises_it(
    kube: Kube, resources: Resources, namespace: str, autoscaling_api: Any, policy_api: Any
) -> None:
    resources.apply(_document(autoscaling={**AUTOSCALING, "minReplicas": 2, "maxReplicas": 3}))

    def at_two() -> dict[str, Any] | None:
        found = _read(kube.apps.read_namespaced_deployment, namespace)
        return found if found is not None and found["spec"]["replicas"] == 2 else None

    deployment = kube.wait_for("the HPA controller to raise the Deployment to 2", at_two, timeout=120)
    # Created without replicas, the field was never the operator's: no hand-over was needed. Nobody owns it
    # after the HPA controller's write either: the scale subresource records no owner of a field that had
    # none (the API server's field manager skips tracking an update when nobody owned anything it sees).
    assert _replicas_owners(deployment) == set()
    # Ready at one pod may still be the status of the moment before the HPA's write: wait for two.
    ready = resources.wait_phase(
        NAME,
        "Ready",
        timeout=90,
        status_also=lambda status: (status.get("replicas"), status.get("readyReplicas")) == (2, 2),
    )
    # An apply of the Deployment leaves an unowned field as it is.
    before = ready["status"]["modelRepository"]
    resources.apply(
        _document(autoscaling={**AUTOSCALING, "minReplicas": 2, "maxReplicas": 3}, streaming=True)
    )
    kube.wait_for(
        "the rollout of the streaming repository", lambda: _rolled_to_new_repository(resources, before)
    )
    assert _deployment(kube, namespace)["spec"]["replicas"] == 2
    assert _read(policy_api.read_namespaced_pod_disruption_budget, namespace) is not None
    resources.delete(NAME)
    kube.wait_for(
        "the HPA and the PDB to go with the resource",
        lambda: (
            _read(autoscaling_api.read_namespaced_horizontal_pod_autoscaler, namespace) is None
            and _read(policy_api.read_namespaced_pod_disruption_budget, namespace) is None
        ),
        timeout=90,
    )
