"""What the serving Deployment's HorizontalPodAutoscaler is doing, in words a person reads.

The autoscaler reports three conditions of its own: ScalingActive (it can read its metric), AbleToScale
(it can change the Deployment's replicas, or waits out a stabilization window) and ScalingLimited (it
wants more than maxReplicas or fewer than minReplicas). They become one condition, `Autoscaling`: False
with the autoscaler's reason when it cannot read the metric or change the Deployment (and what to check),
otherwise True with the pods it wants, its bounds, the metric and target, and what holds it back. Only
values that change with a scaling decision are named, never the metric's current value: an unchanged
decision gives an unchanged status, and `kubectl get hpa` shows the value. Pure: imports the api
models, the facts and the scaling-metric table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from mmd_operator.api.v1alpha1 import AutoscalingSpec
from mmd_operator.facts import AutoscalerFacts
from mmd_operator.knowledge import Runtime
from mmd_operator.scaling_metrics import SCALING_METRICS, source

AUTOSCALING = "Autoscaling"
# Where the custom metrics come from, for a person whose autoscaler cannot read them.
ADAPTER_HINT = (
    "the custom metrics API must be served (prometheus-adapter with the rules in docs/autoscaling.md) and "
    "Prometheus must scrape the serving pods' metrics port"
)
_LIMITS = {
    "TooManyReplicas": "held at maxReplicas: the metric asks for more",
    "TooFewReplicas": "held at minReplicas: the metric asks for fewer",
    "ScaleUpLimit": "the autoscaler's rate limit holds the scale-up back",
    "ScaleDownLimit": "the autoscaler's rate limit holds the scale-down back",
}
_STABILIZING = {
    "ScaleDownStabilized": "a higher recommendation within scaleDownStabilizationSeconds holds it",
    "ScaleUpStabilized": "a lower recommendation within scaleUpStabilizationSeconds holds it",
}
_CANNOT_CHANGE = frozenset({"FailedGetScale", "FailedUpdateScale"})


@dataclass(frozen=True)
class AutoscalingState:
    """The autoscaler, as the `Autoscaling` condition and `status.autoscaling` say it."""

    # True: scaling on its metric; False: it cannot; None: not known yet.
    ok: bool | None
    reason: str
    message: str
    autoscaler: str
    metric: str
    desired_replicas: int | None = None
    current_replicas: int | None = None
    last_scale_time: datetime | None = None


def autoscaling_state(
    spec: AutoscalingSpec, runtime: Runtime, name: str, autoscaler: AutoscalerFacts | None
) -> AutoscalingState:
    """The state of the HorizontalPodAutoscaler `name` that `spec` asks for, observed as `autoscaler`."""
    facts = SCALING_METRICS[spec.metric.name]
    metric_source = source(spec.metric.name, runtime)
    metric = metric_source.custom_metric if metric_source is not None else ""
    what = f"{facts.what} ({metric})"

    # 0 until the autoscaler has decided anything (or while the Deployment is scaled to 0 by hand).
    wanted = autoscaler.desired_replicas or None if autoscaler is not None else None

    def state(ok: bool | None, reason: str, message: str) -> AutoscalingState:
        return AutoscalingState(
            ok=ok,
            reason=reason,
            message=message,
            autoscaler=name,
            metric=metric,
            desired_replicas=wanted,
            current_replicas=autoscaler.current_replicas if autoscaler is not None else None,
            last_scale_time=autoscaler.last_scale_time if autoscaler is not None else None,
        )

    if autoscaler is None:
        return state(
            None,
            "AutoscalerPending",
            f"the HorizontalPodAutoscaler {name} is created with the serving Deployment",
        )
    active = autoscaler.condition("ScalingActive")
    able = autoscaler.condition("AbleToScale")
    limited = autoscaler.condition("ScalingLimited")
    if active is None or able is None:
        return state(
            None,
            "AutoscalerPending",
            f"the HorizontalPodAutoscaler {name} has not reported yet (the controller manager looks every "
            "15 s)",
        )
    if active.status == "False":
        if active.reason == "ScalingDisabled":
            message = (
                f"the HorizontalPodAutoscaler {name} does not scale: the Deployment was scaled to 0 by hand; "
                f"kubectl scale deployment {name} --replicas {spec.min_replicas} lets it scale again"
            )
        elif active.reason.startswith("FailedGet") and active.reason != "FailedGetScale":
            message = (
                f"the HorizontalPodAutoscaler {name} cannot read the {what} of the serving pods, so it does "
                f"not scale: {ADAPTER_HINT}; it says: {active.message}"
            )
        else:
            message = f"the HorizontalPodAutoscaler {name} does not scale ({active.reason}): {active.message}"
        return state(False, active.reason, message)
    if able.status == "False" and able.reason in _CANNOT_CHANGE:
        message = (
            f"the HorizontalPodAutoscaler {name} cannot change the Deployment's replicas ({able.reason}): "
            f"{able.message}"
        )
        return state(False, able.reason, message)
    pods = f"{wanted} serving pod{'s' if wanted != 1 else ''} wanted" if wanted is not None else "scaling"
    message = (
        f"{pods}, between minReplicas {spec.min_replicas} and maxReplicas {spec.max_replicas}, on {what} "
        f"with a target of {spec.metric.target} {facts.target_unit} per pod"
    )
    reason = "ScalingActive"
    if limited is not None and limited.status == "True" and limited.reason in _LIMITS:
        reason = limited.reason
        message += f"; {_LIMITS[limited.reason]}"
    elif able.reason in _STABILIZING:
        reason = able.reason
        message += f"; {_STABILIZING[able.reason]}"
    return state(True, reason, message)
