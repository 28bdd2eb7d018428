"""The operator's decisions, without a cluster: what it applies, joins, leaves, deletes and records for a
resource, given facts as the kube adapter would report them."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from kubernetes import client as k8s

from engine_builder.plan_format import BuildPlan
from engine_builder.progress_format import BuildProgress
from engine_builder.result_format import termination_message
from mmd_operator.api.v1alpha1 import Phase
from mmd_operator.api.v1alpha1.status import ServingRevision
from mmd_operator.desired.decision import manifests
from mmd_operator.facts import (
    AutoscalerFacts,
    DeploymentFacts,
    JobFacts,
    Missing,
    MissingReference,
    PodFacts,
    PodPhase,
)
from mmd_operator.judgement.progress import PROGRESS_POLL_SECONDS
from mmd_operator.plan.model_repository import ModelRepository
from mmd_operator.status import report
from mmd_operator.vocabulary import hashing, labels, names
from mmd_operator.vocabulary.ownership import ObjectKey
from tests.support.builds import summary
from tests.support.decisions import (
    CONFIG,
    ME,
    NOW,
    OTHER,
    UID,
    bound_claim,
    condition,
    decide,
    deployment_of,
    example,
    failed_build,
    kinds,
    live_deployment,
    meta,
    recipe_of,
    served,
    status_of,
)
from tests.support.examples import EXAMPLE_PATHS, plan_example

MODELS = {
    "PersistentVolumeClaim": k8s.V1PersistentVolumeClaim,
    "Job": k8s.V1Job,
    "ConfigMap": k8s.V1ConfigMap,
    "Deployment": k8s.V1Deployment,
    "Service": k8s.V1Service,
    "HorizontalPodAutoscaler": k8s.V2HorizontalPodAutoscaler,
    "PodDisruptionBudget": k8s.V1PodDisruptionBudget,
}


# -- the objects themselves ----------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLE_PATHS, ids=lambda p: p.stem)
def test_every_manifest_parses_into_the_kubernetes_clients_model_and_back_unchanged(path: Any) -> None:
    resource, plan = plan_example(path)
    built = manifests(resource, plan, config=CONFIG)
    scaled = ["HorizontalPodAutoscaler", "PodDisruptionBudget"] if resource.spec.serving.autoscaling else []
    workload = "LeaderWorkerSet" if resource.spec.parallelism.pods_per_replica > 1 else "Deployment"
    assert [m["kind"] for m in built] == [
        "PersistentVolumeClaim",
        "Job",
        "ConfigMap",
        workload,
        "Service",
        *scaled,
    ]
    api = k8s.ApiClient()
    for manifest in built:
        if manifest["kind"] == "LeaderWorkerSet":
            # Not a kind the client knows; its two pod templates are.
            group = manifest["spec"]["leaderWorkerTemplate"]
            parts = [(k8s.V1PodTemplateSpec, group[role]) for role in ("leaderTemplate", "workerTemplate")]
        else:
            parts = [(MODELS[manifest["kind"]], manifest)]
        for model_class, part in parts:
            model = model_class.from_dict(part)
            # Nothing the client model does not know, nothing it would change: the same object back.
            assert api.sanitize_for_serialization(model) == part, manifest["kind"]


def test_the_deployment_runs_the_plans_exact_argv_with_one_gpu_per_rank() -> None:
    resource, plan = example("llava-tp2-fp8")
    deployment = next(m for m in manifests(resource, plan, config=CONFIG) if m["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    server = pod["containers"][0]
    assert server["command"] == list(plan.launch.argv) and server["command"][0] == "mpirun"
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert {"name": "PMIX_MCA_gds", "value": "hash"} in server["env"]
    assert {p["name"]: p["containerPort"] for p in server["ports"]} == {
        "http": 8000,
        "grpc": 8001,
        "metrics": 8002,
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    assert volumes["engine-cache"]["persistentVolumeClaim"] == {
        "claimName": "mmd-engine-cache",
        "readOnly": True,
    }
    mounts = {m["name"]: m for m in server["volumeMounts"]}
    assert mounts["engine-cache"]["readOnly"] is True and mounts["shm"]["mountPath"] == "/dev/shm"
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_probes_give_loading_engines_the_startup_budget_and_liveness_more_than_a_second() -> None:
    resource, plan = example(serving__probes={"startupTimeoutSeconds": 3600})
    server = next(m for m in manifests(resource, plan, config=CONFIG) if m["kind"] == "Deployment")["spec"][
        "template"
    ]["spec"]["containers"][0]
    startup = server["startupProbe"]
    assert startup["httpGet"]["path"] == "/v2/health/ready"
    assert startup["periodSeconds"] * startup["failureThreshold"] == 3600
    assert server["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert server["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert server["livenessProbe"]["timeoutSeconds"] > 1


def test_the_init_container_assembles_code_configs_and_engine_files_and_checks_the_entry() -> None:
    resource, plan = example("whisper")
    init = next(m for m in manifests(resource, plan, config=CONFIG) if m["kind"] == "Deployment")["spec"][
        "template"
    ]["spec"]["initContainers"][0]
    script = init["command"][2]
    key = plan.cache_key
    assert f"test -f /engines/{key}/manifest.json ||" in script
    assert "cp -R /opt/mmd-operator/all_models/whisper/whisper_bls/1/. /models/whisper_bls/1/" in script
    assert f"cp /engines/{key}/assets/mel_filters.npz /models/whisper_bls/1/" in script
    assert "cp /repository-config/tensorrt_llm.pbtxt /models/tensorrt_llm/config.pbtxt" in script
    assert "all_models/inflight_batcher_llm/tensorrt_llm" not in script  # the C++ backend has no code


def test_the_build_job_carries_the_plan_and_the_token_reference_never_a_value() -> None:
    resource, plan = example(
        "mllama",
        build={"backoffLimit": 3, "activeDeadlineSeconds": 7200, "pod": {"nodeSelector": {"gpu": "h100"}}},
    )
    job = next(m for m in manifests(resource, plan, config=CONFIG) if m["kind"] == "Job")
    assert job["metadata"]["name"] == f"build-{plan.cache_key}"
    assert job["spec"]["backoffLimit"] == 3 and job["spec"]["activeDeadlineSeconds"] == 7200
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu": "h100"} and pod["restartPolicy"] == "Never"
    container = pod["containers"][0]
    args = container["args"]
    assert BuildPlan.model_validate_json(args[args.index("--plan-json") + 1]) == plan.build
    assert container["env"] == [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "huggingface", "key": "token"}}}
    ]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert job["metadata"]["labels"][labels.CACHE_KEY] == plan.cache_key


def test_source_claims_are_mounted_read_only_where_the_plan_reads_them() -> None:
    resource, plan = example("internlm-xcomposer2-lora")
    pod = next(m for m in manifests(resource, plan, config=CONFIG) if m["kind"] == "Job")["spec"]["template"][
        "spec"
    ]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/sources/model"]["readOnly"] and mounts["/sources/lora"]["readOnly"]
    claims = {v["name"]: v["persistentVolumeClaim"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    assert claims["source-model"] == {"claimName": "models", "readOnly": True}


def test_user_pod_metadata_reaches_the_pods_but_never_overrides_the_operators_labels() -> None:
    resource, plan = example(
        serving__pod={"labels": {"team": "vision", labels.COMPONENT: "mine"}, "annotations": {"a": "b"}}
    )
    template = next(m for m in manifests(resource, plan, config=CONFIG) if m["kind"] == "Deployment")["spec"][
        "template"
    ]["metadata"]
    assert template["labels"]["team"] == "vision" and template["labels"][labels.COMPONENT] == "serving"
    assert template["annotations"]["a"] == "b"


# -- decisions ------------------------------------------------------------------------------------


def test_a_new_resource_gets_claim_job_repository_and_service_but_no_deployment() -> None:
    resource, plan = example()
    decision = decide(resource, plan, claim=None)
    assert kinds(decision) == ["ConfigMap", "Job", "PersistentVolumeClaim", "Service"]
    status = status_of(decision)
    assert status.phase is Phase.BUILDING and condition(status, "EngineReady").reason == "BuildPending"


def test_a_cache_key_in_the_engine_index_means_no_job_and_a_deployment() -> None:
    resource, plan = example()
    decision = decide(resource, plan, artifact=summary(plan.cache_key))
    assert kinds(decision) == ["ConfigMap", "Deployment", "Service"]
    status = status_of(decision)
    assert status.engine.source == "CacheHit" and condition(status, "EngineReady").status == "True"


def test_a_running_build_keeps_the_deployment_away_and_says_where_it_builds() -> None:
    resource, plan = example()
    job = JobFacts(meta=meta(names.build_job(plan.cache_key, "mmd-engine-cache"), owners=(ME,)))
    pod = PodFacts(meta=meta("build-pod", created=NOW), phase=PodPhase.RUNNING, node="gpu-node-2")
    decision = decide(resource, plan, job=job, job_pods=(pod,))
    assert "Job" not in kinds(decision) and "Deployment" not in kinds(decision)
    engine = condition(status_of(decision), "EngineReady")
    assert (engine.reason, engine.message) == (
        "BuildRunning",
        f"building engine {plan.cache_key} in pod build-pod on gpu-node-2",
    )


def test_a_running_build_says_its_step_in_the_status_the_column_and_the_message() -> None:
    resource, plan = example()
    job = JobFacts(meta=meta(names.build_job(plan.cache_key, "mmd-engine-cache"), owners=(ME,)))
    pod = PodFacts(meta=meta("build-pod", created=NOW), phase=PodPhase.RUNNING, node="gpu-node-2")
    began = NOW.timestamp() - 720
    line = BuildProgress(
        at=NOW.timestamp(),
        started_at=began - 60,
        last_progress_at=NOW.timestamp() - 5,
        step=3,
        steps=5,
        step_name="build-llm",
        step_started_at=began,
    )
    decision = decide(resource, plan, job=job, job_pods=(pod,), job_progress=line)
    status = status_of(decision)
    assert status.progress == "step 3/5 build-llm 12m"
    assert status.engine.progress.step_name == "build-llm" and not status.engine.progress.stalled
    engine = condition(status, "EngineReady")
    assert engine.message == (
        f"building engine {plan.cache_key} in pod build-pod on gpu-node-2: step 3 of 5, build-llm, for 12m "
        "(13m in all)"
    )
    # Read again while it runs: the pod's log says nothing by event.
    assert report(decision.findings, previous=None, now=NOW).recheck_after == PROGRESS_POLL_SECONDS
    # Once the engine is there, no progress is shown.
    assert status_of(decide(resource, plan)).progress is None


def test_a_build_waiting_for_its_engine_cache_claim_is_pending_until_the_claim_binds() -> None:
    resource, plan = example()
    unbound = dataclasses.replace(bound_claim(), phase="Pending")
    job = JobFacts(meta=meta(names.build_job(plan.cache_key, "mmd-engine-cache"), owners=(ME,)))
    pod = PodFacts(
        meta=meta("build-pod", created=NOW),
        phase=PodPhase.PENDING,
        unschedulable="0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
    )
    for facts in ({}, {"job": job, "job_pods": (pod,)}):
        status = status_of(decide(resource, plan, claim=unbound, **facts))
        assert status.phase is Phase.PENDING
        assert condition(status, "EngineReady").message == (
            "waiting for the engine-cache claim mmd-engine-cache to be bound (it is Pending)"
        )
    assert status_of(decide(resource, plan, job=job, job_pods=(pod,))).phase is Phase.BUILDING


def test_a_build_pod_the_scheduler_cannot_place_reports_its_message() -> None:
    resource, plan = example()
    job = JobFacts(meta=meta(names.build_job(plan.cache_key, "mmd-engine-cache"), owners=(ME,)))
    message = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    pod = PodFacts(meta=meta("build-pod"), phase=PodPhase.PENDING, unschedulable=message)
    engine = condition(status_of(decide(resource, plan, job=job, job_pods=(pod,))), "EngineReady")
    assert engine.reason == "InsufficientGPUs" and message in engine.message


def test_a_failed_build_reports_the_builders_step_and_reason_verbatim_and_is_not_retried() -> None:
    resource, plan = example()
    job, pod = failed_build(plan)
    decision = decide(resource, plan, job=job, job_pods=(pod,))
    status = status_of(decision)
    assert status.phase is Phase.FAILED
    assert (
        condition(status, "EngineReady").message == "step build-llm failed (exit code 1): CUDA out of memory"
    )
    assert condition(status, "Ready").message == (
        f"step build-llm failed (exit code 1): CUDA out of memory; kubectl logs job/{job.meta.name} has the "
        "rest, and a change of the spec (or deleting the Job) builds again."
    )
    assert decision.delete == () and "Job" not in kinds(decision)
    # Reported at this generation: looking again changes nothing.
    again = decide(resource, plan, previous=status, job=job, job_pods=(pod,))
    assert again.delete == () and status_of(again, previous=status) == status


def test_a_failed_build_is_built_again_once_the_spec_changed_since_it_was_reported() -> None:
    resource, plan = example()
    job, pod = failed_build(plan)
    reported = status_of(decide(resource, plan, job=job, job_pods=(pod,)))
    changed = resource.model_copy(update={"metadata": {**resource.metadata, "generation": 2}})
    retry = decide(changed, plan, previous=reported, job=job, job_pods=(pod,))
    assert retry.delete == (ObjectKey("batch/v1", "Job", job.meta.name),)
    deleting = dataclasses.replace(job, meta=dataclasses.replace(job.meta, deleting=True))
    assert "Job" not in kinds(decide(changed, plan, previous=reported, job=deleting))  # not while it goes
    assert "Job" in kinds(decide(changed, plan, previous=reported))


def test_a_failed_build_of_another_recipe_is_built_again_at_once() -> None:
    # The Job failed with pod settings the spec no longer has (its fix raced the failure): the cacheKey
    # is the same, the recipe is not, so the failure says nothing about the spec as it is.
    resource, plan = example()
    job, pod = failed_build(plan)
    fixed, fixed_plan = example(build={"backoffLimit": 3})
    assert fixed_plan.cache_key == plan.cache_key and recipe_of(fixed, fixed_plan) != recipe_of(
        resource, plan
    )
    reported = status_of(decide(fixed, fixed_plan, job=job, job_pods=(pod,)))
    again = decide(fixed, fixed_plan, previous=reported, job=job, job_pods=(pod,))
    assert again.delete == (ObjectKey("batch/v1", "Job", job.meta.name),)


def test_a_successful_build_is_recorded_and_the_deployment_follows() -> None:
    resource, plan = example()
    job = JobFacts(
        meta=meta(names.build_job(plan.cache_key, "mmd-engine-cache"), owners=(ME,)), succeeded=True
    )
    built = summary(plan.cache_key)
    pod = PodFacts(
        meta=meta("p", created=NOW), phase=PodPhase.SUCCEEDED, termination_message=termination_message(built)
    )
    decision = decide(resource, plan, job=job, job_pods=(pod,))
    assert decision.record == built and "Deployment" in kinds(decision)
    assert status_of(decision).engine.source == "Built"


def test_a_job_that_reports_another_cache_key_is_a_failure_not_an_engine() -> None:
    resource, plan = example()
    job = JobFacts(
        meta=meta(names.build_job(plan.cache_key, "mmd-engine-cache"), owners=(ME,)), succeeded=True
    )
    pod = PodFacts(
        meta=meta("p"), phase=PodPhase.SUCCEEDED, termination_message=termination_message(summary("0" * 20))
    )
    decision = decide(resource, plan, job=job, job_pods=(pod,))
    assert decision.record is None and "Deployment" not in kinds(decision)
    assert "reported cacheKey 00000000000000000000" in condition(status_of(decision), "EngineReady").message


def test_a_missing_source_claim_creates_nothing_and_names_what_is_missing() -> None:
    resource, plan = example("mllama")
    missing = MissingReference(
        Missing.SOURCE_CLAIM,
        "spec.model.source.pvc.claimName",
        "PersistentVolumeClaim weights not found in namespace ml",
    )
    decision = decide(resource, plan, claim=None, missing=(missing,))
    assert decision.apply == () and decision.join == ()
    status = status_of(decision)
    assert status.phase is Phase.FAILED
    assert condition(status, "Ready").reason == "SourceClaimNotFound"
    assert "PersistentVolumeClaim weights not found" in condition(status, "Ready").message


def test_each_user_of_a_shared_job_joins_it_and_leaves_the_one_it_no_longer_uses() -> None:
    resource, plan = example()
    shared = JobFacts(meta=meta(names.build_job(plan.cache_key, "mmd-engine-cache"), owners=(OTHER,)))
    old = JobFacts(meta=meta("build-0123456789abcdef0123", owners=(ME, OTHER)), succeeded=True)
    decision = decide(resource, plan, job=shared, stale_jobs=(old,))
    assert decision.join == (ObjectKey("batch/v1", "Job", shared.meta.name),)
    assert decision.leave == (ObjectKey("batch/v1", "Job", old.meta.name),)
    assert "Job" not in kinds(decision)


def test_a_claim_created_with_retention_delete_is_joined_by_every_user() -> None:
    resource, plan = example()
    assert decide(resource, plan, claim=bound_claim(owners=(OTHER,), retention="Delete")).join == (
        ObjectKey("v1", "PersistentVolumeClaim", "mmd-engine-cache"),
    )
    assert decide(resource, plan, claim=bound_claim(retention="Retain")).join == ()
    created = decide(*example(engineCache={"retention": "Delete"}), claim=None).manifest(
        "PersistentVolumeClaim"
    )
    assert created is not None and created["metadata"]["ownerReferences"][0]["uid"] == UID
    kept = decide(resource, plan, claim=None).manifest("PersistentVolumeClaim")
    assert kept is not None and "ownerReferences" not in kept["metadata"]


def test_superseded_repositories_are_deleted_only_once_nothing_uses_them() -> None:
    resource, plan = example()
    engine = summary(plan.cache_key)
    current = decide(resource, plan, artifact=engine).manifest("ConfigMap")
    assert current is not None
    name = current["metadata"]["name"]
    older, oldest = meta("llava-repo-aaaaaaaaaa", owners=(ME,)), meta("llava-repo-bbbbbbbbbb", owners=(ME,))
    in_use = DeploymentFacts(meta=meta("llava"), configmap="llava-repo-aaaaaaaaaa")
    decision = decide(
        resource,
        plan,
        artifact=engine,
        configmaps=(meta(name, owners=(ME,)), older, oldest),
        deployment=in_use,
    )
    assert decision.delete == (ObjectKey("v1", "ConfigMap", "llava-repo-bbbbbbbbbb"),)
    pod = PodFacts(meta=meta("llava-1"), phase=PodPhase.RUNNING, configmap="llava-repo-bbbbbbbbbb")
    assert (
        decide(
            resource,
            plan,
            artifact=engine,
            configmaps=(older, oldest),
            deployment=in_use,
            serving_pods=(pod,),
        ).delete
        == ()
    )


def test_while_a_new_engine_builds_the_old_deployment_keeps_serving_untouched() -> None:
    resource, plan = example()
    serving = DeploymentFacts(
        meta=meta("llava", applied="an-older-digest"),
        generation=3,
        observed_generation=3,
        replicas=1,
        status_replicas=1,
        updated_replicas=1,
        ready_replicas=1,
        available_replicas=1,
    )
    decision = decide(resource, plan, deployment=serving)
    assert "Deployment" not in kinds(decision) and "Job" in kinds(decision)
    status = status_of(decision)
    assert status.phase is Phase.BUILDING
    assert condition(status, "Available").status == "True"  # the old pods still answer
    assert condition(status, "Ready").status == "False"


def test_a_repository_over_the_configmap_limit_is_refused_clearly() -> None:
    resource, plan = example()
    huge = ModelRepository(
        configs={**plan.repository.configs, "ensemble": "x" * 1_100_000}, assembly=plan.repository.assembly
    )
    decision = decide(resource, dataclasses.replace(plan, repository=huge), artifact=summary(plan.cache_key))
    assert "ConfigMap" not in kinds(decision) and "Deployment" not in kinds(decision)
    status = status_of(decision)
    assert status.phase is Phase.FAILED and condition(status, "Ready").reason == "RepositoryTooLarge"
    assert "a ConfigMap holds at most 1 MiB" in condition(status, "ModelRepositoryReady").message


def test_a_replicas_change_leaves_the_pod_template_alone() -> None:
    one, two = deployment_of(*example()), deployment_of(*example(serving__replicas=2))
    assert one["spec"]["template"] == two["spec"]["template"]
    assert (one["spec"]["replicas"], two["spec"]["replicas"]) == (1, 2)


def test_a_serving_change_renders_a_new_repository_that_rolls_the_pods_without_a_build() -> None:
    (before, plan_before), (after, plan_after) = example(), example(serving__streaming=True)
    assert plan_before.cache_key == plan_after.cache_key
    old, new = deployment_of(before, plan_before), deployment_of(after, plan_after)
    assert (
        old["spec"]["template"]["metadata"]["annotations"]
        != new["spec"]["template"]["metadata"]["annotations"]
    )

    def volume(deployment: dict[str, Any]) -> dict[str, Any]:
        volumes = deployment["spec"]["template"]["spec"]["volumes"]
        found: dict[str, Any] = next(v for v in volumes if v["name"] == "repository-config")
        return found

    assert volume(old) != volume(new)


def test_the_digest_on_a_manifest_is_of_its_content() -> None:
    resource, plan = example()
    first, second = manifests(resource, plan, config=CONFIG), manifests(resource, plan, config=CONFIG)
    assert first == second
    for manifest in first:
        stamped = hashing.stamped(manifest)
        assert hashing.applied_hash(stamped) == hashing.applied_hash(manifest)
    changed = json.loads(json.dumps(first[3]))
    changed["spec"]["replicas"] = 7
    assert hashing.applied_hash(hashing.stamped(changed)) != hashing.applied_hash(first[3])


# -- serving.autoscaling: the autoscaler, the disruption budget, and who owns replicas ----------------------

AUTOSCALING = {"minReplicas": 1, "maxReplicas": 4, "metric": {"name": "QueueTimePerRequest", "target": 200}}


def test_with_autoscaling_the_deployment_has_no_replicas_and_an_autoscaler_and_a_budget_come_with_it() -> (
    None
):
    resource, plan = example(serving__autoscaling=AUTOSCALING)
    decision = decide(resource, plan, artifact=summary(plan.cache_key))
    assert kinds(decision) == [
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "Service",
    ]
    deployment = decision.manifest("Deployment")
    assert deployment is not None and "replicas" not in deployment["spec"]
    # Nothing to hand over: the Deployment does not exist yet.
    assert decision.handover is None


def test_replicas_are_handed_over_at_their_live_value_before_the_first_apply_without_them() -> None:
    fixed, fixed_plan = example(serving__replicas=2)
    owned_by_the_operator = dataclasses.replace(
        live_deployment(fixed, fixed_plan, replicas=2), replicas_managers=(("mmd-operator", "Apply"),)
    )
    resource, plan = example(serving__autoscaling=AUTOSCALING)
    decision = decide(resource, plan, **served(resource, plan), deployment=owned_by_the_operator)
    assert decision.handover == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llava", "namespace": "ml"},
        "spec": {"replicas": 2},
    }
    # Once the autoscaler has written the field, the operator neither hands over nor sets it.
    scaled = dataclasses.replace(
        owned_by_the_operator, replicas_managers=(("kube-controller-manager", "Update"),)
    )
    decision = decide(resource, plan, **served(resource, plan), deployment=scaled)
    assert decision.handover is None
    deployment = decision.manifest("Deployment")
    assert deployment is not None and "replicas" not in deployment["spec"]


def test_the_status_counts_the_pods_the_autoscaler_set_not_the_specs_default() -> None:
    resource, plan = example(serving__autoscaling=AUTOSCALING)
    deployment = dataclasses.replace(
        live_deployment(*example(serving__autoscaling=AUTOSCALING), replicas=3, ready=3),
        generation=1,
    )
    status = status_of(decide(resource, plan, **served(resource, plan), deployment=deployment))
    assert status.replicas == 3 and status.ready_replicas == 3
    assert status.phase is Phase.READY
    # No autoscaler observed yet: the condition says it is coming, and never holds Ready back.
    autoscaling = condition(status, "Autoscaling")
    assert (autoscaling.status, autoscaling.reason) == ("Unknown", "AutoscalerPending")
    assert status.autoscaling is not None and status.autoscaling.horizontal_pod_autoscaler == "llava"
    assert status.autoscaling.metric == "mmd_triton_queue_time_per_request_seconds"


def test_an_autoscalers_steps_keep_the_resource_ready_and_say_where_the_step_is() -> None:
    autoscaling = {**AUTOSCALING, "minReplicas": 2}
    resource, plan = example(serving__autoscaling=autoscaling)
    live = live_deployment(resource, plan, replicas=2)

    def serving(**deployment: int) -> Any:
        facts = dataclasses.replace(live, **deployment)
        return status_of(decide(resource, plan, **served(resource, plan), deployment=facts))

    up = serving(replicas=3, status_replicas=3, updated_replicas=3)  # the third pod is loading
    assert up.phase is Phase.READY and condition(up, "Ready").status == "True"
    assert (condition(up, "Available").reason, condition(up, "Available").message) == (
        "Scaling",
        "scaling up to 3: 2 of 3 pods ready",
    )
    down = serving(replicas=2, status_replicas=3, updated_replicas=3, ready_replicas=3, available_replicas=3)
    assert down.phase is Phase.READY
    assert condition(down, "Available").message == "scaling down to 2: 3 pods left, 3 ready"
    # Below the autoscaler's minimum it is a first start, and a new template is a rollout: not Ready.
    starting = serving(ready_replicas=1, available_replicas=1)
    assert starting.phase is Phase.DEPLOYING
    rolling = serving(replicas=3, status_replicas=3, updated_replicas=1)
    assert rolling.phase is Phase.DEPLOYING and condition(rolling, "Ready").reason == "RolloutInProgress"
    # Without an autoscaler, a replicas change of the spec is the user's and waits for every pod.
    fixed, fixed_plan = example(serving__replicas=3)
    three = dataclasses.replace(live_deployment(fixed, fixed_plan, replicas=3), ready_replicas=2)
    assert status_of(decide(fixed, fixed_plan, **served(fixed, fixed_plan), deployment=three)).phase is (
        Phase.DEPLOYING
    )


def test_without_autoscaling_the_operators_autoscaler_and_an_unneeded_budget_are_deleted() -> None:
    resource, plan = example()
    autoscaler = AutoscalerFacts(meta=meta("llava", owners=(ME,)))
    budget = meta("llava", owners=(ME,))
    decision = decide(
        resource,
        plan,
        **served(resource, plan),
        deployment=live_deployment(resource, plan),
        autoscaler=autoscaler,
        disruption_budget=budget,
    )
    assert ObjectKey("autoscaling/v2", "HorizontalPodAutoscaler", "llava") in decision.delete
    assert ObjectKey("policy/v1", "PodDisruptionBudget", "llava") in decision.delete
    deployment = decision.manifest("Deployment")
    assert deployment is not None and deployment["spec"]["replicas"] == 1
    # Someone else's objects of the same name are left alone.
    foreign = decide(
        resource,
        plan,
        **served(resource, plan),
        deployment=live_deployment(resource, plan),
        autoscaler=AutoscalerFacts(meta=meta("llava")),
        disruption_budget=meta("llava"),
    )
    assert not {key.kind for key in foreign.delete} & {"HorizontalPodAutoscaler", "PodDisruptionBudget"}


@pytest.mark.parametrize(
    ("spec_changes", "budget"),
    [
        ({}, False),
        ({"serving__replicas": 2}, True),
        ({"serving__autoscaling": {**AUTOSCALING, "maxReplicas": 1}}, False),
        ({"serving__autoscaling": AUTOSCALING}, True),
    ],
    ids=["one-replica", "two-replicas", "autoscaler-up-to-1", "autoscaler-up-to-4"],
)
def test_a_disruption_budget_exists_only_when_more_than_one_serving_pod_can_run(
    spec_changes: dict[str, Any], budget: bool
) -> None:
    resource, plan = example(**spec_changes)
    decision = decide(resource, plan, artifact=summary(plan.cache_key))
    assert (decision.manifest("PodDisruptionBudget") is not None) is budget


def test_superseded_claim_templates_go_once_nothing_may_take_claims_from_them() -> None:
    resource, plan = example(gpus__resourceClaim={"selector": "device.driver == 'gpu.nvidia.com'"})
    template = decide(resource, plan).manifest("ResourceClaimTemplate")
    assert template is not None
    named = {
        which: meta(f"llava-gpus-1-{which}", owners=(ME,))
        for which in ("workload", "pod", "stable", "unused")
    }
    observed = (meta(template["metadata"]["name"], owners=(ME,)), *named.values())
    foreign = meta("llava-gpus-1-foreign", owners=(OTHER,))

    def pod(revision: str, template_name: str, *, ready: bool) -> PodFacts:
        return PodFacts(
            meta=meta(f"llava-{revision}", labels=((labels.DEPLOYMENT_REVISION, revision),)),
            phase=PodPhase.RUNNING,
            ready=ready,
            claim_templates=(template_name,),
        )

    def deleted(previous: Any = None, **facts: Any) -> set[str]:
        decision = decide(resource, plan, previous, claim_templates=(*observed, foreign), **facts)
        return {key.name for key in decision.delete if key.kind == "ResourceClaimTemplate"}

    rolling = dataclasses.replace(
        live_deployment(resource, plan, ready=0), claim_templates=("llava-gpus-1-workload",)
    )
    new_pod = pod("new", "llava-gpus-1-pod", ready=False)
    # No revision to go back to: only what the workload, its pods and the spec name stays.
    assert deleted(deployment=rolling, serving_pods=(new_pod,)) == {
        "llava-gpus-1-stable",
        "llava-gpus-1-unused",
    }
    # A revision to go back to whose pods are gone (an in-place rollout): nothing says what it needs.
    previous = status_of(decide(resource, plan)).model_copy(
        update={"stable_revision": ServingRevision(pod_template_hash="stable")}
    )
    assert deleted(previous, deployment=rolling, serving_pods=(new_pod,)) == set()
    # Its pods run (a surge rollout): theirs stays with the rest in use.
    stable_pod = pod("stable", "llava-gpus-1-stable", ready=True)
    assert deleted(previous, deployment=rolling, serving_pods=(new_pod, stable_pod)) == {
        "llava-gpus-1-unused"
    }
