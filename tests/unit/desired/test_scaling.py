"""`spec.serving.autoscaling` without a cluster: the autoscaler's manifest per runtime and metric, the
Autoscaling condition for each thing a HorizontalPodAutoscaler reports, and the adapter rules users copy."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmd_operator.api.v1alpha1 import AutoscalingSpec
from mmd_operator.desired.scaling import horizontal_pod_autoscaler
from mmd_operator.facts import AutoscalerCondition, AutoscalerFacts, Meta, OwnerRef
from mmd_operator.judgement.autoscaling import AutoscalingState, autoscaling_state
from mmd_operator.knowledge import Runtime
from mmd_operator.plan.resource_plan import plan_resource
from mmd_operator.scaling_metrics import SCALING_METRICS, adapter_config_yaml, adapter_rules
from tests.support.invalid_specs import resource

DOCS = Path(__file__).resolve().parents[3] / "docs" / "autoscaling.md"
OWNER = OwnerRef(name="llava", uid="uid-llava")
SPEC = AutoscalingSpec.model_validate(
    {"minReplicas": 1, "maxReplicas": 4, "metric": {"name": "QueueTimePerRequest", "target": 200}}
)
WHAT = "queue time per request (mmd_triton_queue_time_per_request_seconds)"


def _hpa(document: dict[str, Any]) -> dict[str, Any]:
    planned, _ = plan_resource(document)
    found = horizontal_pod_autoscaler(planned, namespace="ml", owner=OWNER)
    assert found is not None
    return found


def test_trtllm_serve_scales_on_its_own_queue_time_histogram_without_a_model_selector() -> None:
    autoscaling = {
        "minReplicas": 2,
        "maxReplicas": 3,
        "metric": {"name": "QueueTimePerRequest", "target": 1500},
    }
    document = resource("qwen2_5_vl", {"spec": {"serving": {"autoscaling": autoscaling}}})
    metric = _hpa(document)["spec"]["metrics"][0]["pods"]
    assert metric == {
        "metric": {"name": "mmd_trtllm_serve_queue_time_per_request_seconds"},
        "target": {"type": "AverageValue", "averageValue": "1500m"},
    }


def test_pending_requests_are_a_plain_count_per_pod() -> None:
    autoscaling = {"minReplicas": 1, "maxReplicas": 2, "metric": {"name": "PendingRequests", "target": 8}}
    document = resource("llava", {"spec": {"serving": {"autoscaling": autoscaling}}})
    metric = _hpa(document)["spec"]["metrics"][0]["pods"]
    assert metric["metric"] == {"name": "mmd_triton_pending_requests"}
    assert metric["target"] == {"type": "AverageValue", "averageValue": "8"}


def test_tritons_hpa_asks_for_the_metric_without_a_model_selector() -> None:
    # The ensemble's own queue stays empty while its requests wait in tensorrt_llm's: a selector of the
    # entry models would hide the wait, so the adapter's query picks the models instead.
    autoscaling = {
        "minReplicas": 1,
        "maxReplicas": 4,
        "metric": {"name": "QueueTimePerRequest", "target": 200},
    }
    document = resource("llava", {"spec": {"serving": {"autoscaling": autoscaling}}})
    metric = _hpa(document)["spec"]["metrics"][0]["pods"]
    assert metric["metric"] == {"name": "mmd_triton_queue_time_per_request_seconds"}


def _as_the_adapter_queries(metric: str) -> str:
    """The rule's metricsQuery as prometheus-adapter sends it for two pods of namespace ml."""
    (rule,) = [rule for rule in adapter_rules() if rule["name"]["as"] == metric]
    query: str = rule["metricsQuery"]
    return query.replace("<<.LabelMatchers>>", 'namespace="ml",pod=~"llava-a|llava-b"').replace(
        "<<.GroupBy>>", "pod"
    )


def test_tritons_queue_time_adds_every_models_queue_over_the_entry_models_requests() -> None:
    pods = 'namespace="ml",pod=~"llava-a|llava-b"'
    entry = f'nv_inference_request_success{{model=~"ensemble|tensorrt_llm_bls|whisper_bls",{pods}}}'
    assert _as_the_adapter_queries("mmd_triton_queue_time_per_request_seconds") == (
        f"(sum by (pod) (rate(nv_inference_queue_duration_us{{{pods}}}[1m]))"
        f" / (sum by (pod) (rate({entry}[1m])) > 0) / 1e6)"
        f" or (sum by (pod) (rate({entry}[1m])) * 0)"
    )


def test_tritons_pending_requests_add_up_every_model() -> None:
    assert _as_the_adapter_queries("mmd_triton_pending_requests") == (
        'sum by (pod) (nv_inference_pending_request_count{namespace="ml",pod=~"llava-a|llava-b"})'
    )


def _observed(*conditions: tuple[str, str, str], desired: int = 2, current: int = 2) -> AutoscalerFacts:
    return AutoscalerFacts(
        meta=Meta(name="llava", uid="uid-hpa"),
        desired_replicas=desired,
        current_replicas=current,
        last_scale_time=datetime(2026, 11, 25, 12, 0, tzinfo=UTC),
        conditions=tuple(
            AutoscalerCondition(type=kind, status=status, reason=reason, message=f"{reason} said so")
            for kind, status, reason in conditions
        ),
    )


def _state(autoscaler: AutoscalerFacts | None) -> AutoscalingState:
    return autoscaling_state(SPEC, Runtime.TRITON_TRTLLM_ENGINE, "llava", autoscaler)


ABLE = ("AbleToScale", "True", "ReadyForNewScale")
ACTIVE = ("ScalingActive", "True", "ValidMetricFound")


@pytest.mark.parametrize(
    ("autoscaler", "ok", "reason", "message"),
    [
        (
            None,
            None,
            "AutoscalerPending",
            "the HorizontalPodAutoscaler llava is created with the serving Deployment",
        ),
        (
            _observed(),
            None,
            "AutoscalerPending",
            "the HorizontalPodAutoscaler llava has not reported yet (the controller manager looks every "
            "15 s)",
        ),
        (
            _observed(ABLE, ACTIVE, ("ScalingLimited", "False", "DesiredWithinRange")),
            True,
            "ScalingActive",
            f"2 serving pods wanted, between minReplicas 1 and maxReplicas 4, on {WHAT} with a target of "
            "200 ms per pod",
        ),
        (
            _observed(ABLE, ACTIVE, ("ScalingLimited", "True", "TooManyReplicas"), desired=4, current=4),
            True,
            "TooManyReplicas",
            f"4 serving pods wanted, between minReplicas 1 and maxReplicas 4, on {WHAT} with a target of "
            "200 ms per pod; held at maxReplicas: the metric asks for more",
        ),
        (
            _observed(("AbleToScale", "True", "ScaleDownStabilized"), ACTIVE, desired=3, current=3),
            True,
            "ScaleDownStabilized",
            f"3 serving pods wanted, between minReplicas 1 and maxReplicas 4, on {WHAT} with a target of "
            "200 ms per pod; a higher recommendation within scaleDownStabilizationSeconds holds it",
        ),
        (
            _observed(ABLE, ("ScalingActive", "False", "FailedGetPodsMetric"), desired=0),
            False,
            "FailedGetPodsMetric",
            f"the HorizontalPodAutoscaler llava cannot read the {WHAT} of the serving pods, so it does not "
            "scale: the custom metrics API must be served (prometheus-adapter with the rules in "
            "docs/autoscaling.md) and Prometheus must scrape the serving pods' metrics port; it says: "
            "FailedGetPodsMetric said so",
        ),
        (
            _observed(ABLE, ("ScalingActive", "False", "ScalingDisabled"), desired=0, current=0),
            False,
            "ScalingDisabled",
            "the HorizontalPodAutoscaler llava does not scale: the Deployment was scaled to 0 by hand; "
            "kubectl scale deployment llava --replicas 1 lets it scale again",
        ),
        (
            _observed(("AbleToScale", "False", "FailedUpdateScale"), ACTIVE),
            False,
            "FailedUpdateScale",
            "the HorizontalPodAutoscaler llava cannot change the Deployment's replicas (FailedUpdateScale): "
            "FailedUpdateScale said so",
        ),
    ],
    ids=[
        "not-created",
        "not-reported",
        "active",
        "at-max",
        "stabilizing",
        "no-metric",
        "scaled-to-zero",
        "cannot-update",
    ],
)
def test_the_autoscalers_conditions_become_one_sentence(
    autoscaler: AutoscalerFacts | None, ok: bool | None, reason: str, message: str
) -> None:
    state = _state(autoscaler)
    assert (state.ok, state.reason, state.message) == (ok, reason, message)
    assert state.metric == "mmd_triton_queue_time_per_request_seconds"


def test_desired_replicas_stay_empty_until_the_autoscaler_decided() -> None:
    undecided = _state(_observed(ABLE, ("ScalingActive", "False", "FailedGetPodsMetric"), desired=0))
    assert undecided.desired_replicas is None and undecided.current_replicas == 2
    assert _state(_observed(ABLE, ACTIVE, desired=3)).desired_replicas == 3


def test_the_adapter_rules_name_every_custom_metric_the_operator_asks_for() -> None:
    served = {rule["name"]["as"] for rule in adapter_rules()}
    asked = {s.custom_metric for facts in SCALING_METRICS.values() for s in facts.sources.values()}
    assert served == asked
    for rule in adapter_rules():
        assert rule["resources"] == {
            "overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
        }
        assert "<<.LabelMatchers>>" in rule["metricsQuery"] and "<<.GroupBy>>" in rule["metricsQuery"]


def test_docs_show_the_adapter_rules_exactly_as_the_operator_generates_them() -> None:
    text = DOCS.read_text()
    rules = adapter_config_yaml()
    assert f"```yaml\n{rules}```" in text, "docs/autoscaling.md: paste adapter_config_yaml() again"
    assert yaml.safe_load(rules)["rules"] == adapter_rules()
