"""How a change replaces the serving pods: a surge while the scheduler can place the surge pod, in place
(said first, with the GPU figures) once it cannot for `surgeWaitSeconds`, and in place by choice; what the
Deployment, the status and the events then carry."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.desired import serving
from mmd_operator.facts import DeploymentFacts, Meta, NodeFacts, Nodes, PodFacts, PodPhase, Taint
from mmd_operator.judgement.rollout import (
    CONDITION,
    IN_PLACE,
    IN_PLACE_BECAUSE,
    SURGE,
    SURGE_UNSCHEDULABLE,
    rollout_state,
)
from mmd_operator.plan.triton import TritonPlan
from mmd_operator.status import report
from tests.support.builds import summary
from tests.support.decisions import NOW, Decided, decide, example, meta

SCHEDULER = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: not helpful."
ONE_GPU_NODE = Nodes(total=1, with_gpus=(NodeFacts("gpu-0", 1),), requested=(("gpu-0", 1),))


def _rolling(**more: object) -> DeploymentFacts:
    """One replica, mid-rollout: the old pod serves, the new template's pod is counted but not ready."""
    fields: dict[str, object] = {
        "meta": meta("llava"),
        "generation": 2,
        "observed_generation": 2,
        "replicas": 1,
        "status_replicas": 2,
        "updated_replicas": 1,
        "ready_replicas": 1,
        "available_replicas": 1,
        "configmap": "new-repo",
        **more,
    }
    return DeploymentFacts(**fields)  # type: ignore[arg-type]


OLD_POD = PodFacts(
    meta=Meta(name="llava-old"), phase=PodPhase.RUNNING, ready=True, configmap="old-repo", gpus=1
)


def _surge_pod(waited: float) -> PodFacts:
    return PodFacts(
        meta=Meta(name="llava-new", created=NOW - timedelta(seconds=waited)),
        phase=PodPhase.PENDING,
        unschedulable=SCHEDULER,
        configmap="new-repo",
        gpus=1,
    )


def _decide(resource: MultimodalDeployment, plan: TritonPlan, previous: Any = None, **facts: Any) -> Decided:
    """The decision once the engine is built and the model repository applied."""
    built = decide(resource, plan, previous, artifact=summary(plan.cache_key), **facts)
    repository = meta(built.rendered.configmap, applied=built.rendered.configmap_digest)
    return decide(
        resource, plan, previous, artifact=summary(plan.cache_key), configmaps=(repository,), **facts
    )


def _deployment(decided: Decided) -> dict[str, Any]:
    deployment = decided.manifest("Deployment")
    assert deployment is not None
    return deployment


def test_a_change_surges_by_default_and_in_place_by_choice() -> None:
    resource, _ = example()
    surge = rollout_state(resource.spec, None, (), now=NOW, nodes=None)
    assert surge.surge and surge.reason == SURGE
    decided = _decide(*example(), deployment=None)
    assert _deployment(decided)["spec"]["strategy"]["rollingUpdate"] == serving.SURGE
    in_place = _decide(*example(serving__rollout={"strategy": "InPlace"}))
    assert _deployment(in_place)["spec"]["strategy"]["rollingUpdate"] == serving.IN_PLACE
    assert in_place.findings is not None and in_place.findings.rollout is not None
    assert (in_place.findings.rollout.surge, in_place.findings.rollout.reason) == (False, IN_PLACE)


def test_a_surge_pod_the_scheduler_cannot_place_waits_then_the_rollout_goes_on_in_place() -> None:
    resource, _ = example()
    waiting = rollout_state(resource.spec, _rolling(), (OLD_POD, _surge_pod(20)), now=NOW, nodes=None)
    assert waiting.surge and waiting.recheck_after == 41

    fell_back = rollout_state(
        resource.spec, _rolling(), (OLD_POD, _surge_pod(61)), now=NOW, nodes=ONE_GPU_NODE
    )
    assert not fell_back.surge and fell_back.reason == SURGE_UNSCHEDULABLE
    message = fell_back.message
    # The pod that goes, that nothing serves meanwhile, why (the GPU sum and the scheduler), the fields.
    assert "pod llava-old stops before its replacement loads, and no pod serves until it is ready" in message
    assert "the surge pod llava-new cannot be scheduled" in message
    assert "1 replica + 1 surge pod: 2 x spec.engine.tensorParallelSize 1 = 2 nvidia.com/gpu" in message
    assert "offer 1 (gpu-0 1)" in message and SCHEDULER in message
    assert "spec.serving.rollout.surgeWaitSeconds" in message and "startupTimeoutSeconds, 1800 s" in message


def test_the_fallback_is_said_first_then_written_to_the_deployment_and_kept_to_the_rollouts_end() -> None:
    resource, plan = example()
    pods = (OLD_POD, _surge_pod(61))
    # First the status and an Event say it; the Deployment keeps surging until the next reconcile.
    said = _decide(resource, plan, deployment=_rolling(), serving_pods=pods)
    assert _deployment(said)["spec"]["strategy"]["rollingUpdate"] == serving.SURGE
    assert said.findings is not None
    shown = report(said.findings, previous=None, now=NOW)
    condition = next(c for c in shown.status.conditions if c.type == CONDITION)
    because = condition.message
    assert (condition.status, condition.reason) == ("False", SURGE_UNSCHEDULABLE)
    assert "pod llava-old stops" in because and shown.recheck_after == 1.0
    ready = next(c for c in shown.status.conditions if c.type == "Ready")
    assert ready.status == "False" and because in ready.message
    assert [(e.type, e.reason, e.message) for e in shown.events if e.reason == "RollingInPlace"] == [
        ("Warning", "RollingInPlace", because)
    ]

    # Then the Deployment rolls in place, and carries why.
    told = _decide(resource, plan, previous=shown.status, deployment=_rolling(), serving_pods=pods)
    deployment = _deployment(told)
    assert deployment["spec"]["strategy"]["rollingUpdate"] == serving.IN_PLACE
    assert deployment["metadata"]["annotations"][IN_PLACE_BECAUSE] == because
    assert told.findings is not None
    again = report(told.findings, previous=shown.status, now=NOW + timedelta(seconds=5))
    assert not [e for e in again.events if e.reason == "RollingInPlace"]

    # The old pod is gone and the new one scheduled: the live annotation keeps the rollout in place.
    live = _rolling(
        meta=Meta(name="llava", annotations=((IN_PLACE_BECAUSE, because),)),
        status_replicas=1,
        ready_replicas=0,
        available_replicas=0,
    )
    scheduled = PodFacts(meta=Meta(name="llava-new"), phase=PodPhase.RUNNING, configmap="new-repo", gpus=1)
    kept = rollout_state(resource.spec, live, (scheduled,), now=NOW, nodes=None)
    assert (kept.surge, kept.message) == (False, because)

    # Rolled out: the next change surges again.
    done = _rolling(
        meta=Meta(name="llava", annotations=((IN_PLACE_BECAUSE, because),)),
        status_replicas=1,
        ready_replicas=1,
    )
    assert rollout_state(resource.spec, done, (scheduled,), now=NOW, nodes=None).reason == SURGE
    restored = _decide(resource, plan, deployment=done, serving_pods=(scheduled,))
    assert _deployment(restored)["spec"]["strategy"]["rollingUpdate"] == serving.SURGE
    assert IN_PLACE_BECAUSE not in _deployment(restored)["metadata"].get("annotations", {})


def test_a_pod_pending_outside_a_rollout_changes_nothing() -> None:
    resource, _ = example()
    scaling_up = _rolling(status_replicas=2, updated_replicas=2, replicas=2)
    state = rollout_state(resource.spec, scaling_up, (OLD_POD, _surge_pod(600)), now=NOW, nodes=None)
    assert state.surge and state.recheck_after is None


def test_while_the_surge_pod_waits_the_resource_is_deploying_not_degraded() -> None:
    resource, plan = example()
    decided = _decide(resource, plan, deployment=_rolling(), serving_pods=(OLD_POD, _surge_pod(20)))
    assert _deployment(decided)["spec"]["strategy"]["rollingUpdate"] == serving.SURGE
    assert decided.findings is not None
    shown = report(decided.findings, previous=None, now=NOW)
    assert shown.status.phase == "Deploying" and shown.recheck_after == 41
    ready = next(c for c in shown.status.conditions if c.type == "Ready")
    assert "the surge pod llava-new waits for a free GPU; after 60 s" in ready.message


def test_a_surge_pod_no_node_may_take_keeps_the_old_pods_serving() -> None:
    """Going on in place would not place it either: the old pod keeps serving and the status says why."""
    resource, plan = example()
    tainted = Nodes(total=1, with_gpus=(NodeFacts("gpu-0", 1, taints=(Taint("gpu", "a100", "NoSchedule"),)),))
    pods = (OLD_POD, _surge_pod(600))
    state = rollout_state(resource.spec, _rolling(), pods, now=NOW, nodes=tainted)
    assert state.surge and not state.waiting_for_gpus
    other = PodFacts(
        meta=Meta(name="llava-new", created=NOW - timedelta(seconds=600)),
        phase=PodPhase.PENDING,
        unschedulable="0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.",
        gpus=1,
    )
    assert rollout_state(resource.spec, _rolling(), (OLD_POD, other), now=NOW, nodes=None).surge
    decided = _decide(resource, plan, deployment=_rolling(), serving_pods=(OLD_POD, other))
    assert _deployment(decided)["spec"]["strategy"]["rollingUpdate"] == serving.SURGE
    assert decided.findings is not None
    assert report(decided.findings, previous=None, now=NOW).status.phase == "Degraded"


def test_what_ready_says_while_a_pod_loads_and_while_a_surge_holds_one_pod_more() -> None:
    resource, plan = example()
    digest = _decide(resource, plan).rendered.deployment_digest
    loading = PodFacts(
        meta=Meta(name="llava-new"), phase=PodPhase.RUNNING, started=NOW - timedelta(seconds=5), gpus=1
    )
    first = DeploymentFacts(
        meta=meta("llava", applied=digest), replicas=1, status_replicas=1, updated_replicas=1
    )
    decided = _decide(resource, plan, deployment=first, serving_pods=(loading,))
    assert decided.findings is not None
    shown = report(decided.findings, previous=None, now=NOW).status.conditions
    ready = next(c for c in shown if c.type == "Ready")
    assert "with 1800 s to load the engine (spec.serving.probes.startupTimeoutSeconds)" in ready.message

    both = _rolling(meta=meta("llava", applied=digest), ready_replicas=2, available_replicas=2)
    decided = _decide(resource, plan, deployment=both, serving_pods=(OLD_POD,))
    assert decided.findings is not None and decided.findings.serving is not None
    assert decided.findings.serving.message == "rolling out: 1 of 1 pods updated, 2 pods ready, 1 wanted"
