"""The trtllm-serve runtime's objects: download Job, `--config` ConfigMap, Deployment, Service, NetworkPolicy.

The download Job is shared like a build Job (one per download key and claim; every user a plain owner): it
runs the builder image's `python -m engine_builder download` with the plan as an argument (plans hold no
secret), the claim at `/engines`, and the Hugging Face token, when the spec names one, as a file mounted
from its Secret (`--token-file`; never an argument, an environment variable or a ConfigMap). The serving
pod runs `trtllm-serve <snapshot> --backend pytorch --host 0.0.0.0 --port 8000 --tp_size N --config ...`,
with the claim read-only, the YAML from an immutable ConfigMap named after its digest (a new YAML rolls the
pods, as a new repository does on the engine runtime), the Hub set offline (the snapshot is local) and a
writable home in an emptyDir. Probes use `/health` with the spec's startup budget. The Service carries
the OpenAI port and, as `metrics`, the same port again: trtllm-serve serves `/prometheus/metrics` there.

The server fetches any http(s) image URL a client sends (docs/trtllm-serve-double.md), so without
`serving.networkPolicy` the pods get a policy that lets them connect nowhere but DNS; with it, the spec's
policy, on the one port. Pure: imports the api models, the plan, the config and the other builders.
"""

from __future__ import annotations

from typing import Any

from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import network, pods, serving
from mmd_operator.facts import OwnerRef
from mmd_operator.plan.launch import HTTP_PORT, LAUNCH_ENV, METRICS_PORT
from mmd_operator.plan.serve_plan import CONFIG_FILE, CONFIG_MOUNT, SOURCE_MOUNT, ServePlan
from mmd_operator.plan.settings import ENGINE_MOUNT
from mmd_operator.vocabulary import hashing, labels, names, ownership

DOWNLOAD_CONTAINER = "weights-download"
SERVER_CONTAINER = "trtllm-serve"
TOKEN_MOUNT = "/var/run/secrets/huggingface"
TOKEN_FILE = "token"
# trtllm-serve and the libraries under it cache kernels and configs in $HOME; the image's user has none.
HOME = "/home/trtllm-serve"
# Readable by the pod's group (fsGroup) and nobody else.
SECRET_MODE = 0o440
SERVE_PORTS = (("http", HTTP_PORT, "http"), ("metrics", METRICS_PORT, "http"))


def download_job(
    resource: MultimodalDeployment,
    plan: ServePlan,
    *,
    namespace: str,
    claim: str,
    owner: OwnerRef,
    config: OperatorConfig,
) -> dict[str, Any]:
    """The Job that puts `plan`'s snapshot into `claim`, with `owner` as its first user."""
    download = plan.download
    assert download is not None
    build = resource.spec.build
    job_labels = {
        **labels.common(labels.WEIGHTS_DOWNLOAD),
        labels.CACHE_KEY: download.key,
        labels.ENGINE_CACHE_CLAIM: claim,
    }
    args = ["download", "--plan-json", download.model_dump_json(), "--cache-dir", ENGINE_MOUNT]
    mounts: list[dict[str, Any]] = [{"name": "engine-cache", "mountPath": ENGINE_MOUNT}]
    volumes: list[dict[str, Any]] = [{"name": "engine-cache", "persistentVolumeClaim": {"claimName": claim}}]
    hub = resource.spec.model.source.huggingface
    token = hub.token_secret_ref if hub is not None else None
    if token is not None:
        args += ["--token-file", f"{TOKEN_MOUNT}/{TOKEN_FILE}"]
        mounts.append({"name": "hub-token", "mountPath": TOKEN_MOUNT, "readOnly": True})
        volumes.append(
            {
                "name": "hub-token",
                "secret": {
                    "secretName": token.name,
                    "items": [{"key": token.key, "path": TOKEN_FILE}],
                    "defaultMode": SECRET_MODE,
                },
            }
        )
    resources = {
        kind: {name: str(value) for name, value in values.items()}
        for kind, values in (
            ("requests", build.pod.resources.requests),
            ("limits", build.pod.resources.limits),
        )
        if values
    }
    container: dict[str, Any] = {
        "name": DOWNLOAD_CONTAINER,
        "image": config.builder_image,
        "args": args,
        "volumeMounts": mounts,
        # A crash that leaves no result line still reports its last log lines.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": pods.container_security_context(),
    }
    if resources:
        container["resources"] = resources
    if config.hf_endpoint:
        container["env"] = [{"name": "HF_ENDPOINT", "value": config.hf_endpoint}]
    job_spec = {
        "backoffLimit": build.backoff_limit,
        "activeDeadlineSeconds": build.active_deadline_seconds,
        "template": {
            "metadata": pods.pod_metadata(build.pod, job_labels, {}),
            "spec": {
                "restartPolicy": "Never",
                **pods.scheduling(build.pod),
                "securityContext": pods.pod_security_context(),
                "containers": [container],
                "volumes": volumes,
            },
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": names.download_job(download.key, claim),
            "namespace": namespace,
            "labels": job_labels,
            "annotations": {labels.BUILD_RECIPE: hashing.digest(job_spec)},
            "ownerReferences": [ownership.owner_reference(owner, controller=False)],
        },
        "spec": job_spec,
    }


def config_configmap(
    resource: MultimodalDeployment, plan: ServePlan, *, namespace: str, owner: OwnerRef
) -> dict[str, Any]:
    """The immutable ConfigMap of `plan`'s `--config` YAML, named after its digest."""
    return serving.content_configmap(
        resource, {CONFIG_FILE: plan.config_yaml}, cache_key=plan.cache_key, namespace=namespace, owner=owner
    )


def deployment(
    resource: MultimodalDeployment,
    plan: ServePlan,
    *,
    namespace: str,
    claim: str,
    snapshot_key: str | None,
    configmap: str,
    owner: OwnerRef,
) -> dict[str, Any]:
    """The trtllm-serve Deployment serving `plan` (the snapshot `snapshot_key` in `claim`)."""
    spec = resource.spec
    instance = str(resource.metadata["name"])
    pod_labels = {**labels.for_instance(instance, labels.SERVING), labels.CACHE_KEY: plan.cache_key}
    pvc = spec.model.source.pvc
    if pvc is None:
        model_mount = {"name": "engine-cache", "mountPath": ENGINE_MOUNT, "readOnly": True}
        model_volume = {
            "name": "engine-cache",
            "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
        }
    else:
        model_mount = {"name": "model-source", "mountPath": SOURCE_MOUNT, "readOnly": True}
        model_volume = {
            "name": "model-source",
            "persistentVolumeClaim": {"claimName": pvc.claim_name, "readOnly": True},
        }
    server: dict[str, Any] = {
        "name": SERVER_CONTAINER,
        "image": plan.serving_image,
        "command": plan.argv(snapshot_key),
        "env": [
            {"name": "HOME", "value": HOME},
            # The snapshot is local: the server must not reach for the Hub (the policy denies it anyway).
            {"name": "HF_HUB_OFFLINE", "value": "1"},
            {"name": "TRANSFORMERS_OFFLINE", "value": "1"},
            # TP > 1 spawns its ranks through Open MPI, whose PMIx store fails in containers without it.
            *({"name": key, "value": value} for key, value in sorted(LAUNCH_ENV.items())),
        ],
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "resources": pods.resources(spec.serving.pod, plan.tensor_parallel_size),
        # /health answers 200 once the model is loaded (the socket is open, but serves nothing, before).
        **serving.probes(resource, ready_path="/health", live_path="/health"),
        "lifecycle": {"preStop": {"sleep": {"seconds": serving.ENDPOINT_DRAIN_SECONDS}}},
        "volumeMounts": [
            model_mount,
            {"name": "repository-config", "mountPath": CONFIG_MOUNT, "readOnly": True},
            {"name": "home", "mountPath": HOME},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
        "securityContext": pods.container_security_context(),
    }
    pod_spec: dict[str, Any] = {
        **pods.scheduling(spec.serving.pod),
        "securityContext": pods.pod_security_context(),
        "terminationGracePeriodSeconds": serving.ENDPOINT_DRAIN_SECONDS + serving.SERVER_EXIT_SECONDS + 5,
        "containers": [server],
        "volumes": [
            model_volume,
            {"name": "repository-config", "configMap": {"name": configmap}},
            {"name": "home", "emptyDir": {}},
            {
                "name": "shm",
                "emptyDir": {"medium": "Memory", "sizeLimit": str(spec.serving.shared_memory_size)},
            },
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": serving.serving_metadata(instance, namespace, owner),
        "spec": {
            **serving.deployment_replicas(resource),
            "selector": {"matchLabels": labels.serving_selector(instance)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "progressDeadlineSeconds": spec.serving.probes.startup_timeout_seconds
            + serving.PROGRESS_MARGIN_SECONDS,
            "revisionHistoryLimit": 3,
            "template": {
                "metadata": pods.pod_metadata(spec.serving.pod, pod_labels, {labels.REPOSITORY: configmap}),
                "spec": pod_spec,
            },
        },
    }


def service(resource: MultimodalDeployment, *, namespace: str, owner: OwnerRef) -> dict[str, Any]:
    """The Service in front of the trtllm-serve pods: the OpenAI API, and the same port as `metrics`."""
    instance = str(resource.metadata["name"])
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": serving.serving_metadata(instance, namespace, owner),
        "spec": {
            "type": "ClusterIP",
            "selector": labels.serving_selector(instance),
            "ports": [
                {"name": name, "port": port, "targetPort": target, "protocol": "TCP"}
                for name, port, target in SERVE_PORTS
            ],
        },
    }


def network_policy(resource: MultimodalDeployment, *, namespace: str, owner: OwnerRef) -> dict[str, Any]:
    """The serving pods' NetworkPolicy: the spec's on the one port, or egress to DNS only by default."""
    spec = resource.spec.serving.network_policy
    policy = network.network_policy(
        resource, namespace=namespace, owner=owner, inference_ports=(HTTP_PORT,), metrics_port=HTTP_PORT
    )
    if spec is not None:
        assert policy is not None
        return policy
    dns = network.dns_egress(network.default_dns_selector())
    rules = {"policyTypes": ["Egress"], "egress": [dns]}
    return network.serving_policy(str(resource.metadata["name"]), rules, namespace=namespace, owner=owner)
