"""The serving pods' HorizontalPodAutoscaler and PodDisruptionBudget, and who owns the Deployment's replicas.

With `spec.serving.autoscaling` the operator owns an autoscaling/v2 HorizontalPodAutoscaler on the serving
Deployment: one Pods metric, the custom metric `scaling_metrics` names for the spec's metric on its runtime
(the adapter's query picks the models it counts: no metric selector), an average value per pod as the target,
and the spec's stabilization windows. The Deployment manifest then carries no `replicas`, so the
operator's server-side apply neither sets nor owns the field and the autoscaler's writes stay.

Leaving a field out of an apply removes it when no other manager owns it: the Deployment would fall back
to one replica for a moment. So before the first apply without `replicas`, while the operator still owns
it, the handover manager applies `replicas` alone at its live value (as Kubernetes' documentation of
server-side apply hands a field to an autoscaler): the field keeps its value, now owned by the handover,
until the autoscaler's first change takes it. Removing the section puts `replicas` back into the
operator's apply, which takes the field with force from whoever holds it.

A PodDisruptionBudget (at most one serving pod evicted at a time) exists while more than one serving pod
can run: replicas above 1, or an autoscaler allowed above 1. Pure: imports the api models, the scaling
metric table, the serving builder's metadata and the vocabulary.
"""

from __future__ import annotations

from typing import Any

from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.desired.serving import WORKLOADS, serving_metadata
from mmd_operator.facts import OwnerRef
from mmd_operator.scaling_metrics import SCALING_METRICS, source
from mmd_operator.vocabulary import kinds, labels

# The handover's field manager, beside the operator's own: `<field manager>-handover`.
HANDOVER_SUFFIX = "-handover"


def handover_manager(field_manager: str) -> str:
    """The field manager that holds `replicas` between the operator and the autoscaler."""
    return field_manager + HANDOVER_SUFFIX


def horizontal_pod_autoscaler(
    resource: MultimodalDeployment, *, namespace: str, owner: OwnerRef
) -> dict[str, Any] | None:
    """The HorizontalPodAutoscaler of `resource`'s serving Deployment; None without `serving.autoscaling`."""
    autoscaling = resource.spec.serving.autoscaling
    if autoscaling is None:
        return None
    facts = SCALING_METRICS[autoscaling.metric.name]
    metric_source = source(autoscaling.metric.name, resource.spec.serving_runtime)
    # Admission refuses a metric the runtime lacks; a spec that got past it asks for nothing here.
    assert metric_source is not None, f"{autoscaling.metric.name} on {resource.spec.serving_runtime}"
    instance = str(resource.metadata["name"])
    # The serving workload: a LeaderWorkerSet scales groups (its scale subresource counts them and selects
    # their leaders).
    target = WORKLOADS[resource.spec.parallelism.shape]
    workload, name = target.kind, target.name(instance)
    return {
        "apiVersion": kinds.HORIZONTAL_POD_AUTOSCALER.api_version,
        "kind": kinds.HORIZONTAL_POD_AUTOSCALER.kind,
        "metadata": serving_metadata(instance, namespace, owner),
        "spec": {
            "scaleTargetRef": {"apiVersion": workload.api_version, "kind": workload.kind, "name": name},
            "minReplicas": autoscaling.min_replicas,
            "maxReplicas": autoscaling.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metric_source.custom_metric},
                        "target": {
                            "type": "AverageValue",
                            "averageValue": facts.average_value(autoscaling.metric.target),
                        },
                    },
                }
            ],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": autoscaling.scale_up_stabilization_seconds},
                "scaleDown": {"stabilizationWindowSeconds": autoscaling.scale_down_stabilization_seconds},
            },
        },
    }


def most_pods(resource: MultimodalDeployment) -> int:
    """The most serving pods the spec lets run at once: its replicas, or the autoscaler's maximum."""
    serving = resource.spec.serving
    return serving.autoscaling.max_replicas if serving.autoscaling is not None else serving.replicas


def pod_disruption_budget(
    resource: MultimodalDeployment, *, namespace: str, owner: OwnerRef
) -> dict[str, Any] | None:
    """At most one serving pod disrupted at a time, while more than one can run; None otherwise.

    A pod that is not ready (still loading, or broken) never holds a node drain up.
    """
    if most_pods(resource) <= 1:
        return None
    instance = str(resource.metadata["name"])
    return {
        "apiVersion": kinds.POD_DISRUPTION_BUDGET.api_version,
        "kind": kinds.POD_DISRUPTION_BUDGET.kind,
        "metadata": serving_metadata(instance, namespace, owner),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": labels.serving_selector(instance)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def replicas_handover(workload: kinds.ApiKind, name: str, namespace: str, replicas: int) -> dict[str, Any]:
    """The handover's apply: the serving workload's `replicas` alone, at its live value."""
    return {
        "apiVersion": workload.api_version,
        "kind": workload.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas},
    }
