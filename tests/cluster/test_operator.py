"""The operator on the real control plane: the lifecycle of each model type, shared builds, failures and
their recovery, every kind of change, deletion, and an honest status at each step.

The operator runs as its own process (`python -m mmd_operator`, as in its image) against the session's
API server; kwok plays the GPU nodes, the engine builder (a build pod ends with the builder's own success
line for its cacheKey, or with a scripted failure) and the serving pods (Ready, crash-looping or never
ready, by a pod label the resources pass to their pods).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine_builder.result_format import BuildFailed, termination_message
from mmd_operator.api.v1alpha1 import API_VERSION, KIND
from mmd_testbed.localcluster.objects import NodePool
from mmd_testbed.localcluster.stages import FAULT_LABEL, FAULT_MESSAGE_ANNOTATION
from tests.support.kube import Kube, Resources, Tools, printed_rows
from tests.support.nodes import extra_gpu_nodes

from .conftest import OperatorProcess, operator_writes_at_rest

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BUILDS = "app.kubernetes.io/component=engine-build"
H100_NODES = NodePool(count=1, gpus_per_node=8, gpu_model="h100-80gb", name_prefix="h100")


def example(name: str, **changes: Any) -> dict[str, Any]:
    """`examples/<name>.yaml`, with `changes` (section -> fields) merged into its spec."""
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    for section, fields in changes.items():
        document["spec"].setdefault(section, {}).update(fields)
    return document


def renamed(document: dict[str, Any], name: str) -> dict[str, Any]:
    copied = copy.deepcopy(document)
    copied["metadata"]["name"] = name
    return copied


def jobs(kube: Kube, namespace: str) -> list[Any]:
    return list(kube.batch.list_namespaced_job(namespace, label_selector=BUILDS).items)


def children(kube: Kube, namespace: str, name: str) -> dict[str, list[str]]:
    """What the operator made for `name` (labelled with it), by kind."""
    selector = f"app.kubernetes.io/instance={name}"
    return {
        "configmaps": [
            c.metadata.name
            for c in kube.core.list_namespaced_config_map(namespace, label_selector=selector).items
        ],
        "deployments": [
            d.metadata.name
            for d in kube.apps.list_namespaced_deployment(namespace, label_selector=selector).items
        ],
        "services": [
            s.metadata.name
            for s in kube.core.list_namespaced_service(namespace, label_selector=selector).items
        ],
    }


def replica_sets(kube: Kube, namespace: str, name: str) -> list[Any]:
    selector = f"app.kubernetes.io/instance={name}"
    return list(kube.apps.list_namespaced_replica_set(namespace, label_selector=selector).items)


def owner_names(obj: Any) -> list[str]:
    return sorted(ref.name for ref in obj.metadata.owner_references or [])


# -- the lifecycle of every model type ------------------------------------------------------------


def _prepare(kube: Kube, namespace: str, document: dict[str, Any]) -> None:
    """Create what a resource names: the Hub token Secret, the source claims."""
    source = document["spec"]["model"]["source"]
    token = source.get("huggingface", {}).get("tokenSecretRef")
    if token:
        kube.core.create_namespaced_secret(
            namespace,
            {"metadata": {"name": token["name"]}, "stringData": {token["key"]: "hf_not_a_real_token"}},
        )
    claims = {source.get("pvc", {}).get("claimName")}
    lora = document["spec"]["model"].get("lora")
    if lora:
        claims.add(lora["source"].get("pvc", {}).get("claimName"))
    for claim in sorted(c for c in claims if c):
        kube.core.create_namespaced_persistent_volume_claim(
            namespace,
            {
                "metadata": {"name": claim},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "100Gi"}}},
            },
        )


@pytest.mark.parametrize("name", ["llava", "mllama", "qwen2_vl", "internlm-xcomposer2-lora", "whisper"])
def test_each_model_type_goes_from_apply_to_ready(
    kube: Kube, resources: Resources, namespace: str, tools: Tools, name: str
) -> None:
    document = example(name)
    _prepare(kube, namespace, document)
    resource = document["metadata"]["name"]
    resources.apply(document)
    building = resources.wait_phase(resource, "Building")
    cache_key = building["status"]["engine"]["cacheKey"]
    waited = tools.run(
        "kubectl", "wait", "--for=condition=Ready", f"mmd/{resource}", "-n", namespace, "--timeout=60s"
    )
    assert "condition met" in waited.stdout
    ready = resources.get(resource)["status"]
    assert ready["phase"] == "Ready" and ready["readyReplicas"] == 1
    assert ready["engine"] == {
        "cacheKey": cache_key,
        "claim": "mmd-engine-cache",
        "path": f"/{cache_key}",
        "job": f"build-{cache_key}",
        "source": "Built",
        # The session's nodes are all A100s (GPU feature discovery's labels): the engine's one kind.
        "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "computeCapability": "8.0"},
        # The example names no release: the default one.
        "tensorrtLlmVersion": "0.19.0",
    }
    assert ready["endpoints"]["grpc"] == f"grpc://{resource}.{namespace}.svc:8001"
    tp = document["spec"].get("engine", {}).get("tensorParallelSize", 1)
    (job,) = jobs(kube, namespace)
    assert job.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"] == str(tp)
    deployment = kube.apps.read_namespaced_deployment(resource, namespace)
    server = deployment.spec.template.spec.containers[0]
    assert server.resources.limits["nvidia.com/gpu"] == str(tp)
    assert server.command[0] == ("mpirun" if tp > 1 else "/opt/tritonserver/bin/tritonserver")
    made = children(kube, namespace, resource)
    assert made["deployments"] == [resource] and made["services"] == [resource]
    assert made["configmaps"] == [ready["modelRepository"]]
    printed = tools.run("kubectl", "get", "mmd", resource, "-n", namespace).stdout.splitlines()
    assert printed[0].split() == [
        "NAME", "TYPE", "PHASE", "REASON", "READY", "ROLLOUT", "PROGRESS", "CACHE-KEY", "AGE",
    ]  # fmt: skip
    # PROGRESS is empty once the engine is there.
    row = [resource, document["spec"]["model"]["type"], "Ready", "Ready", "1", "Stable", "", cache_key]
    assert list(printed_rows("\n".join(printed))[0].values())[:8] == row


def test_an_fp8_engine_is_refused_on_a100s_and_built_and_served_on_the_h100s_it_is_pinned_to(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    document = example("llava-tp2-fp8")
    _prepare(kube, namespace, document)
    on_a100s = renamed(document, "fp8-anywhere")
    del on_a100s["spec"]["serving"]["pod"]
    resources.apply(on_a100s)
    failed = resources.wait_phase("fp8-anywhere", "Failed")
    message = " ".join(
        next(c for c in failed["status"]["conditions"] if c["type"] == "Ready")["message"].split()
    )
    assert (
        "spec.engine.kvCacheDtype: no kind of GPU in reach can run it: kvCacheDtype fp8 needs compute "
        "capability 8.9 or later; NVIDIA-A100-SXM4-80GB (compute capability 8.0) has not"
    ) in message
    assert jobs(kube, namespace) == []
    with extra_gpu_nodes(kube, H100_NODES) as (h100,):
        resources.apply(document)
        # The operator's node listing may be a minute old: the kind, then the engine of that kind.
        ready = resources.wait_phase(
            "llava-tp2-fp8",
            "Ready",
            timeout=150,
            status_also=lambda status: (
                (status.get("engine") or {}).get("gpu", {}).get("computeCapability") == "9.0"
            ),
        )["status"]
        assert ready["engine"]["gpu"] == {"product": "NVIDIA-H100-80GB-HBM3", "computeCapability": "9.0"}
        build = next(job for job in jobs(kube, namespace) if job.metadata.name == ready["engine"]["job"])
        assert build.spec.template.spec.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        pods = kube.core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/instance=llava-tp2-fp8"
        )
        assert {pod.spec.node_name for pod in pods.items if pod.status.phase == "Running"} == {h100}


def test_resources_with_the_same_engine_inputs_share_one_job_and_deleting_one_keeps_it(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    first = example("llava")
    resources.apply(first)
    resources.apply(renamed(first, "llava-twin"))
    resources.wait_phase("llava", "Ready")
    twin = resources.wait_phase("llava-twin", "Ready")
    (job,) = jobs(kube, namespace)
    assert owner_names(job) == ["llava", "llava-twin"]
    assert twin["status"]["engine"]["cacheKey"] == resources.get("llava")["status"]["engine"]["cacheKey"]

    late = renamed(first, "llava-late")  # after the build: a cache hit, no Job of its own
    resources.apply(late)
    hit = resources.wait_phase("llava-late", "Ready")
    assert hit["status"]["engine"]["source"] == "CacheHit"
    assert len(jobs(kube, namespace)) == 1

    resources.delete("llava")
    kube.wait_for("llava to go", lambda: not children(kube, namespace, "llava")["deployments"])
    (kept,) = jobs(kube, namespace)
    assert kept.metadata.uid == job.metadata.uid
    kube.wait_for(
        "the job to lose its deleted owner", lambda: "llava" not in owner_names(jobs(kube, namespace)[0])
    )


def test_a_failing_build_reports_the_builders_reason_and_recovers_once_the_spec_is_fixed(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    failure = BuildFailed(step="build-llm", exit_code=1, reason="[TensorRT-LLM][ERROR] CUDA out of memory")
    broken = example(
        "llava",
        build={
            "backoffLimit": 0,
            "pod": {
                "labels": {FAULT_LABEL: "fail"},
                "annotations": {FAULT_MESSAGE_ANNOTATION: termination_message(failure)},
            },
        },
    )
    resources.apply(broken)
    failed = resources.wait_phase("llava", "Failed")
    ready = next(c for c in failed["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "BuildFailed"
    line = "step build-llm failed (exit code 1): [TensorRT-LLM][ERROR] CUDA out of memory"
    engine = next(c for c in failed["status"]["conditions"] if c["type"] == "EngineReady")
    assert engine["message"] == line
    job = failed["status"]["engine"]["job"]
    assert ready["message"] == (
        f"{line}; kubectl logs job/{job} has the rest, and a change of the spec (or deleting the Job) builds "
        "again."
    )
    (failure,) = kube.events_about(namespace, "llava", "Failed", containing="CUDA out of memory")
    assert failure.type == "Warning"
    involved = failure.involved_object  # what `kubectl describe` matches the Event to the resource by
    assert (involved.api_version, involved.kind, involved.namespace) == (API_VERSION, KIND, namespace)
    assert involved.uid == failed["metadata"]["uid"] and involved.resource_version
    assert children(kube, namespace, "llava")["deployments"] == []

    fixed = example("llava", build={"backoffLimit": 0})
    resources.apply(fixed)
    resources.wait_phase("llava", "Ready")
    # The failed Job was replaced, not kept beside a new one; the new one completes.
    kube.wait_for(
        "the new build Job to complete", lambda: [j.status.succeeded for j in jobs(kube, namespace)] == [1]
    )


def test_more_replicas_than_gpus_is_degraded_with_the_schedulers_message(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    # Four nodes of 8 GPUs: five pods of TP 8 cannot all run.
    resources.apply(
        example("llava", engine={"tensorParallelSize": 8, "maxBatchSize": 4}, serving={"replicas": 5})
    )
    degraded = resources.wait_phase("llava", "Degraded")
    available = next(c for c in degraded["status"]["conditions"] if c["type"] == "Available")
    assert available["reason"] == "InsufficientGPUs"
    assert (
        "Insufficient nvidia.com/gpu" in available["message"]
        and "0/4 nodes are available" in available["message"]
    )
    resources.apply(
        example("llava", engine={"tensorParallelSize": 8, "maxBatchSize": 4}, serving={"replicas": 2})
    )
    resources.wait_phase("llava", "Ready")


@pytest.mark.parametrize(("fault", "reason"), [("crashloop", "CrashLoop"), ("never-ready", "PodsNotReady")])
def test_serving_pods_in_trouble_are_degraded_and_recover(
    resources: Resources, fault: str, reason: str
) -> None:
    probes = {"startupTimeoutSeconds": 10}
    troubled = example(
        "llava",
        serving={
            "probes": probes,
            "pod": {
                "labels": {FAULT_LABEL: fault},
                "annotations": {FAULT_MESSAGE_ANNOTATION: "model load failed"},
            },
        },
    )
    resources.apply(troubled)
    degraded = resources.wait_phase("llava", "Degraded", timeout=90)
    ready = next(c for c in degraded["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == reason
    if fault == "crashloop":
        assert "CrashLoopBackOff" in ready["message"] and "model load failed" in ready["message"]
    resources.apply(example("llava", serving={"probes": probes}))
    resources.wait_phase("llava", "Ready")


# -- changes --------------------------------------------------------------------------------------


def test_a_serving_change_rolls_the_pods_without_a_build(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    resources.apply(example("llava"))
    before = resources.wait_phase("llava", "Ready")["status"]
    job_uid = jobs(kube, namespace)[0].metadata.uid
    resources.apply(example("llava", serving={"streaming": True}))
    after = resources.wait_phase("llava", "Ready")["status"]
    assert [j.metadata.uid for j in jobs(kube, namespace)] == [job_uid]
    assert after["engine"]["cacheKey"] == before["engine"]["cacheKey"]
    assert after["modelRepository"] != before["modelRepository"]
    assert len(replica_sets(kube, namespace, "llava")) == 2  # one new pod template
    kube.wait_for(
        "the superseded repository to be removed",
        lambda: children(kube, namespace, "llava")["configmaps"] == [after["modelRepository"]],
    )


def test_a_replicas_change_restarts_nothing(kube: Kube, resources: Resources, namespace: str) -> None:
    resources.apply(example("llava"))
    resources.wait_phase("llava", "Ready")
    pods = {
        p.metadata.name
        for p in kube.core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=serving"
        ).items
    }
    resources.apply(example("llava", serving={"replicas": 2}))
    ready = resources.wait_phase("llava", "Ready")
    assert ready["status"]["readyReplicas"] == 2
    after = {
        p.metadata.name
        for p in kube.core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=serving"
        ).items
    }
    assert pods < after and len(replica_sets(kube, namespace, "llava")) == 1


def test_a_build_change_builds_while_the_old_pods_serve_then_rolls(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    slow = {"pod": {"annotations": {"localcluster.mmd.dev/build-duration": "6s"}}}
    resources.apply(example("llava", build=slow))
    first = resources.wait_phase("llava", "Ready", timeout=90)["status"]
    serving = {
        p.metadata.name
        for p in kube.core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=serving"
        ).items
    }
    resources.apply(example("llava", build=slow, engine={"maxBatchSize": 4}))
    building = resources.wait_phase("llava", "Building")["status"]
    assert building["engine"]["cacheKey"] != first["engine"]["cacheKey"]
    available = next(c for c in building["conditions"] if c["type"] == "Available")
    assert available["status"] == "True"  # the old pods still answer
    still = {
        p.metadata.name
        for p in kube.core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=serving"
        ).items
        if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    }
    assert serving <= still
    ready = resources.wait_phase("llava", "Ready", timeout=90)["status"]
    assert ready["engine"]["cacheKey"] == building["engine"]["cacheKey"]
    deployment = kube.apps.read_namespaced_deployment("llava", namespace)
    labels = deployment.spec.template.metadata.labels
    assert labels["serving.multimodal.dev/cache-key"] == ready["engine"]["cacheKey"]
    kube.wait_for("the old build Job to go with its only user", lambda: len(jobs(kube, namespace)) == 1)


def test_an_admitted_spec_the_operator_refuses_is_invalid_with_the_field_and_creates_nothing(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    # CEL cannot see llava's 576 visual tokens per image; the plan can.
    resources.apply(example("llava", engine={"maxInputLen": 500}))
    failed = resources.wait_phase("llava", "Failed")
    validated = next(c for c in failed["status"]["conditions"] if c["type"] == "Validated")
    assert validated["reason"] == "InvalidSpec"
    assert (
        "spec.engine.maxInputLen: is 500 but one request carries 576 x 1 = 576 visual tokens"
        in validated["message"]
    )
    assert jobs(kube, namespace) == [] and children(kube, namespace, "llava") == {
        "configmaps": [],
        "deployments": [],
        "services": [],
    }
    resources.apply(example("llava", engine={"maxInputLen": 2048}))
    resources.wait_phase("llava", "Ready")


def test_deleting_collects_every_child_and_keeps_a_retained_engine_cache(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    resources.apply(example("llava"))
    resources.wait_phase("llava", "Ready")
    resources.delete("llava")

    def gone() -> bool:
        made = children(kube, namespace, "llava")
        return not any(made.values()) and not jobs(kube, namespace)

    kube.wait_for("every child to be garbage-collected", gone)
    (claim,) = kube.core.list_namespaced_persistent_volume_claim(namespace).items
    assert claim.metadata.name == "mmd-engine-cache" and claim.metadata.deletion_timestamp is None
    index = kube.core.read_namespaced_config_map("mmd-engine-cache-index", namespace)
    assert len(index.data) == 1  # a later resource with this cacheKey is a cache hit


def test_an_engine_cache_with_retention_delete_goes_with_its_last_user(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    cache = {"claimName": "scratch-engines", "retention": "Delete"}
    resources.apply(example("llava", engineCache=cache))
    resources.apply(renamed(example("llava", engineCache=cache), "llava-twin"))
    resources.wait_phase("llava", "Ready")
    resources.wait_phase("llava-twin", "Ready")
    claim = kube.core.read_namespaced_persistent_volume_claim("scratch-engines", namespace)
    assert owner_names(claim) == ["llava", "llava-twin"]
    resources.delete("llava")
    kube.wait_for(
        "the claim to lose one owner",
        lambda: (
            owner_names(kube.core.read_namespaced_persistent_volume_claim("scratch-engines", namespace))
            == ["llava-twin"]
        ),
    )
    resources.delete("llava-twin")
    kube.wait_for(
        "the claim and its index to go",
        lambda: (
            not kube.core.list_namespaced_persistent_volume_claim(namespace).items
            and not kube.core.list_namespaced_config_map(
                namespace, label_selector="app.kubernetes.io/component=engine-index"
            ).items
        ),
    )


# -- the operator itself --------------------------------------------------------------------------


def test_a_killed_operator_restarts_and_converges_without_duplicates_or_orphans(
    kube: Kube, resources: Resources, namespace: str, operator: OperatorProcess
) -> None:
    slow = {"pod": {"annotations": {"localcluster.mmd.dev/build-duration": "4s"}}}
    resources.apply(example("llava", build=slow))
    resources.apply(renamed(example("llava", build=slow), "llava-twin"))
    resources.apply(example("whisper", build=slow))
    resources.wait_phase("llava", "Building")
    operator.kill()
    try:
        resources.apply(example("whisper", build=slow, serving={"streaming": True}))
        resources.delete("llava-twin")
    finally:
        operator.start()
    resources.wait_phase("llava", "Ready", timeout=90)
    whisper = resources.wait_phase("whisper", "Ready", timeout=90)
    assert whisper["metadata"]["generation"] == whisper["status"]["observedGeneration"]
    builds = jobs(kube, namespace)
    keys = [j.metadata.labels["serving.multimodal.dev/cache-key"] for j in builds]
    assert len(keys) == len(set(keys)) == 2  # one Job per cacheKey, none twice
    assert all(owner_names(j) in (["llava"], ["whisper"]) for j in builds)
    assert children(kube, namespace, "llava-twin") == {"configmaps": [], "deployments": [], "services": []}
    repositories = children(kube, namespace, "whisper")["configmaps"]
    assert repositories == [whisper["status"]["modelRepository"]]  # the superseded one did not linger


def test_nothing_is_written_while_nothing_changes(
    resources: Resources, namespace: str, local_cluster: Any, tmp_path: Path
) -> None:
    resources.apply(example("llava"))
    resources.apply(example("whisper"))
    resources.wait_phase("llava", "Ready")
    resources.wait_phase("whisper", "Ready")
    writes = operator_writes_at_rest(local_cluster.audit_log, namespace, 30)
    assert writes == [], json.dumps(writes, indent=1)[:3000]
