"""A ResourceQuota that refuses a pod the operator asked for: admission's sum over the quota's own figures
and what the plan's pod asks, scopes honoured, and what the status says of a Job without its pod and a
Deployment short of pods (the quota, the pod, the figures, the field)."""

from __future__ import annotations

from datetime import UTC, datetime

from mmd_operator.facts import DeploymentFacts, JobFacts, Meta, Observed, QuotaFacts
from mmd_operator.judgement import judge
from mmd_operator.judgement.availability import serving_state
from mmd_operator.judgement.placement import serving_demand
from mmd_operator.judgement.quotas import counts, job_refusal, pod_ask, refusal, serving_refusal
from mmd_operator.judgement.triton import WORDS
from mmd_operator.kube import object_facts
from mmd_operator.status.assessment import _serving_refusal
from tests.support.examples import plan_any_example, plan_example

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GIB = 1 << 30


def quota(name: str, hard: dict[str, str], used: dict[str, str] | None = None, **spec: object) -> QuotaFacts:
    return object_facts.quota(
        {"metadata": {"name": name}, "spec": {"hard": hard, **spec}, "status": {"used": used or {}}}
    )


def test_a_pod_counts_what_admission_counts() -> None:
    _, plan = plan_example("llava")
    assert plan.resources.helper is not None
    ask = pod_ask(
        plan.resources.serving,
        plan.resources.helper,
        who="serving pod",
        section="serving",
        priority_class=None,
    )
    assert ask.amounts == {
        "pods": 1,
        "count/pods": 1,
        "requests.cpu": 2,
        "cpu": 2,
        "requests.memory": 28 * GIB,
        "memory": 28 * GIB,
        "limits.memory": 28 * GIB,
        "requests.nvidia.com/gpu": 1,
    }


def test_the_quota_short_of_room_is_named_with_each_resource_s_figures_and_its_field() -> None:
    _, plan = plan_example("llava")
    assert plan.resources.job is not None
    ask = pod_ask(plan.resources.job, None, who="build pod", section="build", priority_class=None)
    roomy = quota("a-roomy", {"requests.memory": "1Ti"})
    small = quota(
        "small",
        {"requests.memory": "16Gi", "limits.memory": "64Gi", "requests.cpu": "1500m"},
        {"requests.cpu": "500m"},
    )
    found = refusal([small, roomy], ask)
    assert found is not None and found.quota == "small"
    assert found.message("Job build-x") == (
        "ResourceQuota small refuses the build pod of Job build-x: it asks requests.cpu 2, with 500m of "
        "1500m used: 1 short; requests.memory 45Gi, with 0 of 16Gi used: 29Gi short"
    )
    assert found.fix() == (
        "raise the quota (kubectl describe resourcequota small) or lower "
        "spec.build.pod.resources.requests.cpu and spec.build.pod.resources.requests.memory; its controller "
        "creates the pod once it fits"
    )
    assert refusal([roomy], ask) is None


def test_scopes_the_operator_s_pods_are_not_in_leave_them_alone() -> None:
    _, plan = plan_example("llava")
    ask = pod_ask(plan.resources.serving, None, who="serving pod", section="serving", priority_class=None)
    tiny = {"pods": "0"}
    assert not counts(quota("best-effort", tiny, scopes=["BestEffort"]), ask)
    assert not counts(quota("terminating", tiny, scopes=["Terminating"]), ask)
    assert counts(quota("not-best-effort", tiny, scopes=["NotBestEffort", "NotTerminating"]), ask)
    selector = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}
    assert not counts(quota("high", tiny, scopeSelector=selector), ask)
    high = pod_ask(plan.resources.serving, None, who="serving pod", section="serving", priority_class="high")
    assert counts(quota("high", tiny, scopeSelector=selector), high)
    found = refusal([quota("no-pods", {"count/pods": "2"}, {"count/pods": "2"})], ask)
    assert found is not None and found.shortfalls[0].words() == "count/pods 1, with 2 of 2 used: 1 short"
    assert "lower spec.serving.replicas" in found.fix()


def test_a_job_without_its_pod_reports_the_quota_and_not_a_job_that_is_starting() -> None:
    resource, plan = plan_example("llava")
    job = JobFacts(meta=Meta(f"build-{plan.cache_key}"), started=NOW)
    quotas = (quota("small", {"requests.memory": "16Gi"}),)
    observed = Observed(now=NOW, job=job, quotas=quotas)
    judged = judge(plan, observed, None, 1, resource.spec)
    assert judged.artifact.reason == "QuotaExceeded" and not judged.artifact.failed
    assert judged.artifact.message == (
        f"ResourceQuota small refuses the build pod of Job build-{plan.cache_key}: it asks requests.memory "
        "45Gi, with 0 of 16Gi used: 29Gi short"
    )
    assert judged.artifact.summary.endswith("its controller creates the pod once it fits.")
    # Without the quotas read (no permission), or once the pod exists, the Job's own state stands.
    assert judge(plan, Observed(now=NOW, job=job), None, 1, resource.spec).artifact.reason == "BuildPending"
    assert job_refusal(plan.resources, resource.spec, Observed(now=NOW, job=job, quotas=())) is None


def test_a_deployment_short_of_a_pod_the_quota_refuses_is_degraded_with_the_controller_s_words() -> None:
    resource, plan = plan_any_example("qwen2_5_vl")
    words = (
        'pods "qwen2-5-vl-7d9c-x" is forbidden: exceeded quota: small, requested: limits.memory=19Gi, used: '
        "limits.memory=0, limited: limits.memory=10Gi"
    )
    deployment = object_facts.deployment(
        {
            "metadata": {"name": "qwen2-5-vl", "generation": 1},
            "spec": {"replicas": 1},
            "status": {
                "observedGeneration": 1,
                "conditions": [
                    {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": words}
                ],
            },
        }
    )
    assert deployment.replica_failure == words
    observed = Observed(now=NOW, deployment=deployment, quotas=(quota("small", {"limits.memory": "10Gi"}),))
    assert serving_refusal(plan.resources, resource.spec, observed) is not None
    refused = _serving_refusal(resource, plan, observed)
    assert refused is not None
    message, summary = refused
    assert message == (
        "ResourceQuota small refuses the serving pod of Deployment qwen2-5-vl: it asks limits.memory 19Gi, "
        f"with 0 of 10Gi used: 9Gi short (the ReplicaSet controller: {words})"
    )
    assert (
        summary.startswith("ResourceQuota small refuses the serving pod")
        and "spec.serving.pod.resources" in summary
    )
    state = serving_state(
        deployment, (), desired=1, applied=True, artifact_ready=True, now=NOW, startup_budget=1800,
        demand=serving_demand(resource.spec), waits_for=WORDS, refused=refused,
    )  # fmt: skip
    assert state.trouble and state.reason == "QuotaExceeded" and state.message == message


def test_a_group_s_leader_is_checked_while_leaders_are_missing_then_its_worker() -> None:
    resource, plan = plan_any_example("qwen2_5_vl-72b-two-nodes")
    assert plan.resources.worker is not None
    quotas = (quota("team", {"requests.memory": "64Gi"}),)
    group = DeploymentFacts(
        meta=Meta("qwen2-5-vl-72b-group"), replicas=1, kind="LeaderWorkerSet", group_size=2
    )
    found = serving_refusal(plan.resources, resource.spec, Observed(now=NOW, deployment=group, quotas=quotas))
    assert found is not None and found.ask.who == "leader pod"
    leader = object_facts.pod(
        {
            "metadata": {
                "name": "qwen2-5-vl-72b-group-0",
                "labels": {"leaderworkerset.sigs.k8s.io/worker-index": "0"},
            },
            "status": {"phase": "Running"},
        }
    )
    observed = Observed(now=NOW, deployment=group, serving_pods=(leader,), quotas=quotas)
    found = serving_refusal(plan.resources, resource.spec, observed)
    assert found is not None and found.ask.who == "worker pod"
    memory = plan.resources.worker.requests["memory"]
    assert found.message("LeaderWorkerSet x").endswith(
        f"requests.memory {memory}, with 0 of 64Gi used: {int(memory[:-2]) - 64}Gi short"
    )
