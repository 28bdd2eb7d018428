"""What the status says, without a cluster: the phase, the conditions and their reasons, the events and
the log lines, for the facts the kube adapter would report (a resource serving, loading, failing, scaled
by its autoscaler), each reason short of Ready one sentence that says what to do."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from engine_builder.result_format import BuildFailed
from mmd_operator.api.v1alpha1 import Phase
from mmd_operator.api.validation import Problem
from mmd_operator.facts import (
    DeploymentFacts,
    JobFacts,
    Missing,
    MissingReference,
    PodFacts,
    PodPhase,
)
from mmd_operator.judgement.artifact import describe_failure
from mmd_operator.knowledge import Runtime
from mmd_operator.plan.model_repository import ModelRepository
from mmd_operator.status import Findings, report, transition
from mmd_operator.status.report import SPEC_WARNINGS
from mmd_operator.vocabulary import names
from tests.support.builds import summary
from tests.support.decisions import (
    ME,
    NOW,
    bound_claim,
    condition,
    decide,
    example,
    failed_build,
    live_deployment,
    meta,
    served,
    status_of,
)

ROOT = Path(__file__).resolve().parents[3]


def test_serving_trouble_makes_the_phase_degraded_with_what_kubernetes_said() -> None:
    resource, plan = example(serving__replicas=2)
    live = live_deployment(resource, plan, replicas=2, ready=1)
    scheduler = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    pending = PodFacts(meta=meta("llava-2"), phase=PodPhase.PENDING, unschedulable=scheduler)
    status = status_of(
        decide(resource, plan, **served(resource, plan), deployment=live, serving_pods=(pending,))
    )
    assert status.phase is Phase.DEGRADED
    assert condition(status, "Available").reason == "InsufficientGPUs"
    assert condition(status, "Available").message == (
        "pod llava-2 cannot be scheduled: spec.serving.replicas 2 x spec.engine.tensorParallelSize 1 = 2 "
        f"nvidia.com/gpu. Scheduler: {scheduler}"
    )
    assert condition(status, "Ready").message.startswith("spec.serving.replicas 2 x ")
    crash = PodFacts(
        meta=meta("llava-2"),
        phase=PodPhase.RUNNING,
        crash_loop="container tritonserver is in CrashLoopBackOff",
    )
    status = status_of(
        decide(resource, plan, **served(resource, plan), deployment=live, serving_pods=(crash,))
    )
    assert (status.phase, condition(status, "Ready").reason) == (Phase.DEGRADED, "CrashLoop")
    lost = PodFacts(meta=meta("llava-1"), phase=PodPhase.RUNNING, node="gpu-node-3", node_lost=True)
    status = status_of(
        decide(resource, plan, **served(resource, plan), deployment=live, serving_pods=(lost,))
    )
    assert (status.phase, condition(status, "Ready").reason) == (Phase.DEGRADED, "NodeLost")
    assert "gpu-node-3 stopped reporting" in condition(status, "Ready").message


def test_a_pod_still_loading_within_its_budget_is_deploying_and_past_it_degraded() -> None:
    resource, plan = example(serving__probes={"startupTimeoutSeconds": 600})
    live = live_deployment(resource, plan, ready=0)
    loading = PodFacts(meta=meta("llava-1"), phase=PodPhase.RUNNING, started=NOW - timedelta(seconds=120))
    decision = decide(resource, plan, **served(resource, plan), deployment=live, serving_pods=(loading,))
    assert decision.findings is not None
    result = report(decision.findings, previous=None, now=NOW)
    assert result.status.phase is Phase.DEPLOYING and result.recheck_after == pytest.approx(481)
    stuck = dataclasses.replace(loading, started=NOW - timedelta(seconds=700))
    status = status_of(
        decide(resource, plan, **served(resource, plan), deployment=live, serving_pods=(stuck,))
    )
    assert status.phase is Phase.DEGRADED and condition(status, "Ready").reason == "PodsNotReady"


def test_ready_waits_for_the_rollout_and_for_this_generation() -> None:
    resource, plan = example()
    done = dataclasses.replace(live_deployment(resource, plan), generation=2, observed_generation=2)
    ready = status_of(decide(resource, plan, **served(resource, plan), deployment=done))
    assert ready.phase is Phase.READY and condition(ready, "Ready").status == "True"
    assert ready.observed_generation == 1
    rolling = dataclasses.replace(done, status_replicas=2)  # an old pod is still there
    assert (
        condition(
            status_of(decide(resource, plan, **served(resource, plan), deployment=rolling)), "Ready"
        ).reason
        == "RolloutInProgress"
    )
    stale = dataclasses.replace(done, observed_generation=1)  # the controller has not seen the change
    assert (
        status_of(decide(resource, plan, **served(resource, plan), deployment=stale)).phase is Phase.DEPLOYING
    )
    older = dataclasses.replace(done, meta=meta("llava", applied="an-older-digest"))
    assert (
        status_of(decide(resource, plan, **served(resource, plan), deployment=older)).phase is Phase.DEPLOYING
    )


def test_an_unchanged_world_gives_an_identical_status_and_no_event() -> None:
    resource, plan = example()
    decision = decide(resource, plan)
    assert decision.findings is not None
    first = report(decision.findings, previous=None, now=NOW)
    assert [e.reason for e in first.events] == ["Building"]
    later = report(decision.findings, previous=first.status, now=NOW + timedelta(minutes=5))
    assert later.status == first.status and later.events == ()


def test_warnings_are_a_status_note_and_one_event_and_never_hold_ready_back() -> None:
    resource, plan = example()
    findings = decide(resource, plan).findings
    assert findings is not None
    warned = dataclasses.replace(findings, warnings=("spec.x: a trap", "spec.y: another"))
    first = report(warned, previous=None, now=NOW)
    assert first.status.warnings == ["spec.x: a trap", "spec.y: another"]
    assert [(e.type, e.reason) for e in first.events] == [("Normal", "Building"), ("Warning", SPEC_WARNINGS)]
    assert first.events[1].message == "2 warnings about the spec: spec.x: a trap; spec.y: another"
    unwarned = report(findings, previous=None, now=NOW).status
    # The same phase and conditions as without warnings.
    assert first.status.phase == unwarned.phase and first.status.conditions == unwarned.conditions
    # At rest: the identical status and no event.
    later = report(warned, previous=first.status, now=NOW + timedelta(minutes=10))
    assert later.status == first.status and later.events == ()
    # Cleared: the field goes, with no event.
    cleared = report(findings, previous=first.status, now=NOW + timedelta(minutes=20))
    assert cleared.status.warnings is None and cleared.events == ()
    assert "warnings" not in cleared.status.model_dump(by_alias=True, exclude_none=True)


def test_endpoints_and_selector_point_at_the_service() -> None:
    resource, plan = example()
    status = status_of(decide(resource, plan))
    assert (
        status.endpoints.http == "http://llava.ml.svc:8000"
        and status.endpoints.grpc == "grpc://llava.ml.svc:8001"
    )
    assert "app.kubernetes.io/instance=llava" in status.selector


def test_reconciling_and_stalled_say_what_the_phase_says_in_the_kstatus_convention() -> None:
    resource, plan = example()
    live, down = live_deployment(resource, plan), live_deployment(resource, plan, ready=0)
    crash = PodFacts(
        meta=meta("llava-1"), phase=PodPhase.RUNNING, crash_loop="container tritonserver crashed"
    )
    job, pod = failed_build(plan)
    samples = {
        Phase.BUILDING: status_of(decide(resource, plan)),
        Phase.DEPLOYING: status_of(decide(resource, plan, **served(resource, plan))),
        Phase.READY: status_of(decide(resource, plan, **served(resource, plan), deployment=live)),
        Phase.DEGRADED: status_of(
            decide(resource, plan, **served(resource, plan), deployment=down, serving_pods=(crash,))
        ),
        Phase.FAILED: status_of(decide(resource, plan, job=job, job_pods=(pod,))),
    }
    for phase, status in samples.items():
        assert status.phase is phase
        ready, reconciling, stalled = (
            condition(status, kind) for kind in ("Ready", "Reconciling", "Stalled")
        )
        in_progress = phase in (Phase.PENDING, Phase.BUILDING, Phase.DEPLOYING)
        assert reconciling.status == ("True" if in_progress else "False"), phase
        assert stalled.status == ("True" if phase in (Phase.FAILED, Phase.DEGRADED) else "False"), phase
        if reconciling.status == "True" or stalled.status == "True":
            # The abnormal condition carries the reason and message of Ready, so tools show the cause.
            abnormal = reconciling if reconciling.status == "True" else stalled
            assert (abnormal.reason, abnormal.message) == (ready.reason, ready.message)


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (
            BuildFailed(step="build-llm", exit_code=1, reason="CUDA out of memory"),
            "step build-llm failed (exit code 1): CUDA out of memory",
        ),
        (BuildFailed(reason="Traceback: boom"), "Traceback: boom"),
        (
            BuildFailed(exit_code=137, reason="writing rank0.engine"),
            "the builder exited (exit code 137), killed by SIGKILL (out of memory or evicted) without a "
            "result; its last line: writing rank0.engine",
        ),
        (
            BuildFailed(exit_code=2, reason="usage: engine_builder"),
            "the builder exited (exit code 2) without a result; its last line: usage: engine_builder",
        ),
    ],
)
def test_a_failed_build_is_described_with_what_is_known(failure: BuildFailed, message: str) -> None:
    assert describe_failure(failure) == message


def test_the_log_hears_of_a_failure_once_per_reason_and_of_the_recovery() -> None:
    resource, plan = example()
    building = status_of(decide(resource, plan))
    live = live_deployment(resource, plan, ready=0)
    crashing = PodFacts(
        meta=meta("llava-1"),
        phase=PodPhase.RUNNING,
        crash_loop="container tritonserver is in CrashLoopBackOff",
    )
    degraded = status_of(
        decide(resource, plan, **served(resource, plan), deployment=live, serving_pods=(crashing,)),
        previous=building,
    )
    assert transition(None, building) is None and transition(building, building) is None
    entered = transition(building, degraded)
    assert entered is not None and entered.failing and entered.text.startswith("is Degraded: CrashLoop: ")
    assert transition(degraded, degraded) is None  # still failing the same way: nothing more
    recovered = transition(degraded, building)
    assert recovered is not None and not recovered.failing and recovered.text == "recovered: Building"


def _every_state_short_of_ready() -> dict[str, Any]:
    """A status for each way a resource can be short of Ready, by the reason its Ready condition shows."""
    resource, plan = example()
    job_name = names.build_job(plan.cache_key, "mmd-engine-cache")
    job = JobFacts(meta=meta(job_name, owners=(ME,)))
    failed_job, failed_pod = failed_build(plan)
    retried = dataclasses.replace(failed_job, failed=False, failure=None)
    at = {"created": NOW}
    starting = PodFacts(meta=meta("build-pod", **at), phase=PodPhase.PENDING)
    stuck = dataclasses.replace(
        starting, unschedulable="0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    )
    unmatched = dataclasses.replace(
        starting,
        unschedulable="0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector.",
    )
    running = PodFacts(meta=meta("build-pod", **at), phase=PodPhase.RUNNING, node="gpu-node-1")
    unbound = dataclasses.replace(bound_claim(), phase="Pending")
    done, two = served(resource, plan), live_deployment(resource, plan, replicas=2, ready=1)
    wide, wide_plan = example(serving__replicas=2)
    wide_done, wide_live = served(wide, wide_plan), live_deployment(wide, wide_plan, replicas=2, ready=1)
    serving_pod = PodFacts(meta=meta("llava-1"), phase=PodPhase.RUNNING, started=NOW - timedelta(seconds=60))
    huge = ModelRepository(
        configs={**plan.repository.configs, "ensemble": "x" * 1_100_000}, assembly=plan.repository.assembly
    )

    def missing(kind: Missing, field: str, message: str, fix: str) -> Any:
        return status_of(
            decide(resource, plan, claim=None, missing=(MissingReference(kind, field, message, fix),))
        )

    def trouble(*pods: PodFacts, deployment: DeploymentFacts = wide_live) -> Any:
        return status_of(decide(wide, wide_plan, **wide_done, deployment=deployment, serving_pods=pods))

    problem = Problem("spec.engine.maxSeqLen", "must be greater than 2048")
    invalid = Findings(generation=1, runtime=Runtime.TRITON_TRTLLM_ENGINE, problems=[problem])
    return {
        "InvalidSpec": report(invalid, previous=None, now=NOW).status,
        "BuildPending (creating the Job)": status_of(decide(resource, plan)),
        "BuildPending (the Job starts)": status_of(decide(resource, plan, job=job)),
        "BuildPending (its pod starts)": status_of(decide(resource, plan, job=job, job_pods=(starting,))),
        "BuildPending (the claim is not bound)": status_of(decide(resource, plan, claim=unbound)),
        "BuildRunning": status_of(decide(resource, plan, job=job, job_pods=(running,))),
        "BuildRunning (between attempts)": status_of(
            decide(resource, plan, job=retried, job_pods=(failed_pod,))
        ),
        "BuildFailed": status_of(decide(resource, plan, job=failed_job, job_pods=(failed_pod,))),
        "InsufficientGPUs (build)": status_of(decide(resource, plan, job=job, job_pods=(stuck,))),
        "Unschedulable (build)": status_of(decide(resource, plan, job=job, job_pods=(unmatched,))),
        "SecretNotFound": missing(
            Missing.SECRET,
            "spec.model.source.huggingface.tokenSecretRef",
            "Secret hf not found in namespace ml",
            "create it",
        ),
        "SecretKeyNotFound": missing(
            Missing.SECRET_KEY,
            "spec.model.source.huggingface.tokenSecretRef",
            "Secret hf has no key token",
            "add the key",
        ),
        "SourceClaimNotFound": missing(
            Missing.SOURCE_CLAIM,
            "spec.model.source.pvc.claimName",
            "PersistentVolumeClaim w not found in namespace ml",
            "create the claim",
        ),
        "RepositoryTooLarge": status_of(
            decide(resource, dataclasses.replace(plan, repository=huge), artifact=summary(plan.cache_key))
        ),
        "Rendering": status_of(decide(resource, plan, artifact=summary(plan.cache_key))),
        "Deploying": status_of(decide(resource, plan, **done)),
        "RolloutInProgress": status_of(
            decide(resource, plan, **done, deployment=dataclasses.replace(two, updated_replicas=1))
        ),
        "PodsNotReady (starting)": trouble(serving_pod),
        "PodsNotReady (restarted)": trouble(dataclasses.replace(serving_pod, restarts=3)),
        "PodsNotReady (past its budget)": trouble(
            dataclasses.replace(serving_pod, started=NOW - timedelta(hours=1))
        ),
        "PodsNotReady (no progress)": trouble(
            deployment=dataclasses.replace(wide_live, progress_failure="ReplicaSet has timed out")
        ),
        "CrashLoop": trouble(
            dataclasses.replace(serving_pod, crash_loop="container x is in CrashLoopBackOff")
        ),
        "NodeLost": trouble(dataclasses.replace(serving_pod, node="gpu-node-3", node_lost=True)),
        "InsufficientGPUs (serving)": trouble(dataclasses.replace(stuck, meta=meta("llava-2"))),
    }


# What a sentence a person acts on says to do: a command, a field to change, or that nothing is needed.
_ACTIONS = ("kubectl", "nothing to do yet", "fix", "create", "add", "lower", "change", "look after", "report",
            "mmctl", "free")  # fmt: skip


def test_every_reason_short_of_ready_is_one_sentence_that_says_what_to_do() -> None:
    states = _every_state_short_of_ready()
    documented = (ROOT / "docs" / "troubleshooting.md").read_text()
    for label, status in states.items():
        reason = label.split(" ")[0]
        ready = condition(status, "Ready")
        assert ready.reason == reason and ready.status == "False", (label, ready)
        assert f"**`{reason}`**" in documented, f"{reason} is not in docs/troubleshooting.md"
        message = ready.message
        assert "\n" not in message and message.endswith("."), (label, message)
        assert ". " not in message.replace("e.g. ", ""), (label, message)  # one sentence
        assert any(action in message for action in _ACTIONS), (label, message)
        # The condition the reason comes from keeps the details, which Ready repeats or sums up.
        detailed = [
            c
            for c in status.conditions
            if c.reason == reason and c.type not in ("Ready", "Reconciling", "Stalled")
        ]
        assert detailed and all(c.message != message for c in detailed), (label, detailed)
