"""A container the kernel killed for going over its memory limit: what the pod's status says (OOMKilled,
exit code 137), read into the facts with the limit from the pod's spec, and said in the status as such,
with the field to raise; a pod that recovered is no trouble."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from engine_builder.result_format import BuildFailed, termination_message
from mmd_operator.facts import DeploymentFacts, JobFacts, Meta, Observed
from mmd_operator.judgement.availability import serving_state
from mmd_operator.judgement.placement import build_demand, serving_demand
from mmd_operator.judgement.triton import WORDS, engine_state
from mmd_operator.kube import object_facts
from tests.support.examples import plan_example

NOW = datetime(2026, 1, 1, tzinfo=UTC)
OOM = {"reason": "OOMKilled", "exitCode": 137, "startedAt": "2026-01-01T00:00:00Z"}


def _pod(name: str, container: str, limit: str, status: dict[str, Any], **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
        "spec": {
            "containers": [
                {"name": container, "resources": {"requests": {"memory": limit}, "limits": {"memory": limit}}}
            ]
        },
        "status": status,
    }


def _crash_looping(ready: bool = False) -> dict[str, Any]:
    waiting = {
        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}
    }
    return {
        "phase": "Running",
        "startTime": "2026-01-01T00:00:00Z",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "containerStatuses": [
            {
                "name": "tritonserver",
                "ready": ready,
                "restartCount": 3,
                "state": {"running": {}} if ready else waiting,
                "lastState": {"terminated": OOM},
            }
        ],
    }


def test_a_serving_container_killed_at_its_limit_is_said_so_with_the_limit_and_the_field() -> None:
    pod = object_facts.pod(_pod("llava-6d5f-x", "tritonserver", "28Gi", _crash_looping()))
    assert pod.oom_killed == "container tritonserver, over its memory limit of 28Gi"
    # Before: "it last said: OOMKilled", as if the program had said it.
    assert pod.crash_loop == (
        "container tritonserver is in CrashLoopBackOff (back-off 40s restarting failed container, exit code "
        "137); it last ended OOMKilled"
    )
    resource, _ = plan_example("llava")
    deployment = DeploymentFacts(meta=Meta("llava"), generation=1, observed_generation=1, replicas=1)
    state = serving_state(
        deployment, (pod,), desired=1, applied=True, artifact_ready=True, now=NOW, startup_budget=1800,
        demand=serving_demand(resource.spec), waits_for=WORDS,
    )  # fmt: skip
    assert state.trouble and state.reason == "OOMKilled"
    assert state.message == (
        "pod llava-6d5f-x: the kernel killed container tritonserver, over its memory limit of 28Gi "
        "(OOMKilled, 3 restarts)"
    )
    assert "raise spec.serving.pod.resources.limits.memory (status.podResources says" in state.summary


def test_a_pod_that_came_back_after_an_oom_kill_is_no_trouble() -> None:
    pod = object_facts.pod(_pod("llava-6d5f-x", "tritonserver", "28Gi", _crash_looping(ready=True)))
    assert pod.oom_killed is not None and pod.ready
    resource, _ = plan_example("llava")
    deployment = DeploymentFacts(
        meta=Meta("llava"), generation=1, observed_generation=1, replicas=1, status_replicas=1,
        updated_replicas=1, ready_replicas=1, available_replicas=1,
    )  # fmt: skip
    state = serving_state(
        deployment, (pod,), desired=1, applied=True, artifact_ready=True, now=NOW, startup_budget=1800,
        demand=serving_demand(resource.spec), waits_for=WORDS,
    )  # fmt: skip
    assert not state.trouble and state.reason == "AllReplicasAvailable"


def test_a_build_killed_at_its_limit_says_oomkilled_not_out_of_memory_or_evicted() -> None:
    _, plan = plan_example("llava")
    job_name = f"build-{plan.cache_key}"
    # With FallbackToLogsOnError the message is the log's tail: no result line.
    ended = {
        **OOM,
        "message": "[TensorRT-LLM] converting layer 17 of 32",
        "finishedAt": "2026-01-01T00:10:00Z",
    }

    def status(terminated: dict[str, Any]) -> dict[str, Any]:
        return {
            "phase": "Failed",
            "containerStatuses": [{"name": "engine-builder", "state": {"terminated": terminated}}],
        }

    pod = object_facts.pod(_pod(f"{job_name}-abcde", "engine-builder", "45Gi", status(ended)))
    job = JobFacts(
        meta=Meta(job_name), failed=True, failure="BackoffLimitExceeded: Job has reached the limit"
    )
    state = engine_state(plan, Observed(now=NOW, job=job, job_pods=(pod,)), None, 1, build_demand(plan.spec))
    assert state.reason == "BuildFailed" and state.failed
    assert state.message == (
        "the builder was OOMKilled: the kernel killed container engine-builder, over its memory limit of "
        "45Gi (exit code 137); its last line: [TensorRT-LLM] converting layer 17 of 32; raise "
        "spec.build.pod.resources.limits.memory (status.podResources says what the derived figure rests on)"
    )
    # A failure the builder reported itself, in a step, names the step.
    reported = termination_message(BuildFailed(step="convert-llm", exit_code=137, reason="Killed"))
    pod = object_facts.pod(
        _pod(f"{job_name}-abcde", "engine-builder", "45Gi", status({**ended, "message": reported}))
    )
    state = engine_state(plan, Observed(now=NOW, job=job, job_pods=(pod,)), None, 1, build_demand(plan.spec))
    assert (
        "(exit code 137); in step convert-llm; raise spec.build.pod.resources.limits.memory" in state.message
    )
