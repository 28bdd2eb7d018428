"""The model repository ConfigMap, the tritonserver Deployment and its Service.

The ConfigMap is immutable and named after a digest of its content, so a different repository is a new
ConfigMap, and a new name in the pod template rolls the pods. A serving pod assembles its repository in
an init container: the Python model code shipped in the serving image, the configs from the ConfigMap
and the files some models load from the engine cache entry (Whisper's tokenizer and mel filters); it
refuses to start on an incomplete cache entry. The main container runs the exact launch argv of the
plan. Probes: a startup budget the user sets (loading engines takes minutes), then readiness on
`/v2/health/ready` and liveness on `/v2/health/live`. A rollout replaces pods one at a time without a
surge, so it never asks for GPUs the cluster lacks; a pod leaving waits until its Service stops sending
to it before tritonserver is told to stop, then has tritonserver's own drain time for the requests it
holds. Pure: imports the api models, the plan and the config.
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from engine_builder.result_format import MANIFEST_NAME
from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import pods
from mmd_operator.facts import OwnerRef
from mmd_operator.plan.launch import GRPC_PORT, HTTP_PORT, METRICS_PORT
from mmd_operator.plan.resource_plan import ResourcePlan
from mmd_operator.plan.settings import ENGINE_MOUNT, MODEL_REPOSITORY
from mmd_operator.vocabulary import hashing, labels, names, ownership

SERVER_CONTAINER = "tritonserver"
ASSEMBLY_CONTAINER = "model-repository"
CONFIG_MOUNT = "/repository-config"
# The API server refuses objects over 1 MiB; keep room for the ConfigMap's metadata.
CONFIGMAP_DATA_LIMIT = 1_000_000
PORTS = (("http", HTTP_PORT), ("grpc", GRPC_PORT), ("metrics", METRICS_PORT))
STARTUP_PERIOD_SECONDS = 10
# The Deployment controller reports ProgressDeadlineExceeded this long after the startup budget.
PROGRESS_MARGIN_SECONDS = 300
# A deleted pod stays in its Service's endpoints until kube-proxy (or a load balancer) catches up; a
# tritonserver told to stop before then answers new requests "Server exiting". So the pod waits first.
ENDPOINT_DRAIN_SECONDS = 5
# tritonserver waits this long (its --exit-timeout-secs default) for requests in flight after SIGTERM.
SERVER_EXIT_SECONDS = 30
# A hung server drains nothing: a liveness kill gets the endpoint wait and a short stop.
LIVENESS_KILL_GRACE_SECONDS = ENDPOINT_DRAIN_SECONDS + 5


def repository_data(plan: ResourcePlan) -> dict[str, str]:
    """The ConfigMap's data: one `<model>.pbtxt` per model directory."""
    return {f"{model}.pbtxt": text for model, text in sorted(plan.repository.configs.items())}


def repository_size(data: dict[str, str]) -> int:
    """Bytes the data takes in the stored object."""
    return sum(len(key.encode()) + len(value.encode()) for key, value in data.items())


def repository_configmap(
    resource: MultimodalDeployment, plan: ResourcePlan, *, namespace: str, owner: OwnerRef
) -> dict[str, Any]:
    """The immutable ConfigMap of `plan`'s rendered repository."""
    return content_configmap(
        resource, repository_data(plan), cache_key=plan.cache_key, namespace=namespace, owner=owner
    )


def content_configmap(
    resource: MultimodalDeployment, data: dict[str, str], *, cache_key: str, namespace: str, owner: OwnerRef
) -> dict[str, Any]:
    """An immutable ConfigMap of `resource`'s `data`, named after its digest, controlled by `owner`."""
    instance = str(resource.metadata["name"])
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": names.repository(instance, hashing.digest(data)),
            "namespace": namespace,
            "labels": {
                **labels.for_instance(instance, labels.MODEL_REPOSITORY),
                labels.CACHE_KEY: cache_key,
            },
            "ownerReferences": [ownership.owner_reference(owner, controller=True)],
        },
        "immutable": True,
        "data": data,
    }


def assembly_script(plan: ResourcePlan, code_dir: str) -> str:
    """The init container's shell script that assembles the model repository."""
    entry = f"{ENGINE_MOUNT}/{plan.cache_key}"
    incomplete = shlex.quote(f"engine cache entry {plan.cache_key} is missing or incomplete")
    lines = [
        "set -eu",
        f"test -f {shlex.quote(f'{entry}/{MANIFEST_NAME}')} || {{ echo {incomplete} >&2; exit 1; }}",
    ]
    for part in plan.repository.assembly:
        version_dir = f"{MODEL_REPOSITORY}/{part.model}/1"
        lines.append(f"mkdir -p {shlex.quote(version_dir)}")
        if part.code is not None:
            lines.append(f"cp -R {shlex.quote(f'{code_dir}/{part.code}/1')}/. {shlex.quote(version_dir)}/")
        for file in part.entry_files:
            lines.append(f"cp {shlex.quote(f'{entry}/{file}')} {shlex.quote(version_dir)}/")
        lines.append(
            f"cp {shlex.quote(f'{CONFIG_MOUNT}/{part.model}.pbtxt')} "
            f"{shlex.quote(f'{MODEL_REPOSITORY}/{part.model}/config.pbtxt')}"
        )
    lines.append(f"echo 'assembled {len(plan.repository.assembly)} models in {MODEL_REPOSITORY}'")
    return "\n".join(lines) + "\n"


def deployment_replicas(resource: MultimodalDeployment) -> dict[str, int]:
    """`replicas` of the Deployment's spec: the spec's, or nothing while an autoscaler sets it (`scaling`)."""
    serving = resource.spec.serving
    return {} if serving.autoscaling is not None else {"replicas": serving.replicas}


def serving_metadata(instance: str, namespace: str, owner: OwnerRef) -> dict[str, Any]:
    """Metadata of the Deployment and the Service, which share a name and belong to `instance` alone."""
    return {
        "name": names.serving(instance),
        "namespace": namespace,
        "labels": labels.for_instance(instance, labels.SERVING),
        "ownerReferences": [ownership.owner_reference(owner, controller=True)],
    }


def probes(
    resource: MultimodalDeployment,
    *,
    ready_path: str = "/v2/health/ready",
    live_path: str = "/v2/health/live",
) -> dict[str, Any]:
    """The startup, readiness and liveness probes of the server container, on the `http` port."""
    probes = resource.spec.serving.probes
    timeout = probes.liveness_timeout_seconds
    ready = {"httpGet": {"path": ready_path, "port": "http"}, "timeoutSeconds": timeout}
    return {
        # Until the first success the other probes do not run: the budget covers engine loading.
        "startupProbe": {
            **ready,
            "periodSeconds": STARTUP_PERIOD_SECONDS,
            "failureThreshold": math.ceil(probes.startup_timeout_seconds / STARTUP_PERIOD_SECONDS),
        },
        "readinessProbe": {**ready, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {
            "httpGet": {"path": live_path, "port": "http"},
            "timeoutSeconds": timeout,
            "periodSeconds": 10,
            "failureThreshold": probes.liveness_failure_threshold,
            "terminationGracePeriodSeconds": LIVENESS_KILL_GRACE_SECONDS,
        },
    }


def deployment(
    resource: MultimodalDeployment,
    plan: ResourcePlan,
    *,
    namespace: str,
    claim: str,
    repository: str,
    config: OperatorConfig,
    owner: OwnerRef,
) -> dict[str, Any]:
    """The tritonserver Deployment serving `plan` from the repository ConfigMap `repository`."""
    serving = resource.spec.serving
    instance = str(resource.metadata["name"])
    image = plan.settings.serving_image
    code_dir = serving.model_code_path or config.model_code_path
    pod_labels = {**labels.for_instance(instance, labels.SERVING), labels.CACHE_KEY: plan.cache_key}
    mounts = [
        {"name": "model-repository", "mountPath": MODEL_REPOSITORY},
        {"name": "engine-cache", "mountPath": ENGINE_MOUNT, "readOnly": True},
    ]
    server: dict[str, Any] = {
        "name": SERVER_CONTAINER,
        "image": image,
        "command": list(plan.launch.argv),
        "env": [{"name": key, "value": value} for key, value in sorted(plan.launch.env.items())],
        "ports": [{"name": name, "containerPort": port, "protocol": "TCP"} for name, port in PORTS],
        "resources": pods.resources(serving.pod, plan.settings.tensor_parallel_size),
        **probes(resource),
        "lifecycle": {"preStop": {"sleep": {"seconds": ENDPOINT_DRAIN_SECONDS}}},
        "volumeMounts": [*mounts, {"name": "shm", "mountPath": "/dev/shm"}],
        "securityContext": pods.container_security_context(),
    }
    assemble: dict[str, Any] = {
        "name": ASSEMBLY_CONTAINER,
        "image": image,
        "command": ["/bin/sh", "-c", assembly_script(plan, code_dir)],
        "volumeMounts": [*mounts, {"name": "repository-config", "mountPath": CONFIG_MOUNT, "readOnly": True}],
        "securityContext": pods.container_security_context(),
    }
    pod_spec: dict[str, Any] = {
        **pods.scheduling(serving.pod),
        "securityContext": pods.pod_security_context(),
        "terminationGracePeriodSeconds": ENDPOINT_DRAIN_SECONDS + SERVER_EXIT_SECONDS + 5,
        "initContainers": [assemble],
        "containers": [server],
        "volumes": [
            {"name": "model-repository", "emptyDir": {}},
            {"name": "repository-config", "configMap": {"name": repository}},
            {"name": "engine-cache", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
            {
                "name": "shm",
                "emptyDir": {"medium": "Memory", "sizeLimit": str(serving.shared_memory_size)},
            },
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": serving_metadata(instance, namespace, owner),
        "spec": {
            **deployment_replicas(resource),
            "selector": {"matchLabels": labels.serving_selector(instance)},
            # Never more pods than replicas: a rollout must not wait for GPUs the cluster lacks.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "progressDeadlineSeconds": serving.probes.startup_timeout_seconds + PROGRESS_MARGIN_SECONDS,
            "revisionHistoryLimit": 3,
            "template": {
                "metadata": pods.pod_metadata(serving.pod, pod_labels, {labels.REPOSITORY: repository}),
                "spec": pod_spec,
            },
        },
    }


def service(resource: MultimodalDeployment, *, namespace: str, owner: OwnerRef) -> dict[str, Any]:
    """The Service in front of the serving pods: HTTP, gRPC and metrics."""
    instance = str(resource.metadata["name"])
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": serving_metadata(instance, namespace, owner),
        "spec": {
            "type": "ClusterIP",
            "selector": labels.serving_selector(instance),
            "ports": [
                {"name": name, "port": port, "targetPort": name, "protocol": "TCP"} for name, port in PORTS
            ],
        },
    }
