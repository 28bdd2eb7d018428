"""The trtllm-serve runtime's children: the download Job, the `--config` ConfigMap, trtllm-serve's Deployment.

The download Job runs the builder image's `python -m engine_builder download` with the plan as an
argument (plans hold no secret), and the Hugging Face token, when the spec names one, as a file mounted
from its Secret (`--token-file`; never an argument, an environment variable or a ConfigMap). A
PersistentVolumeClaim source needs no Job and no engine-cache claim. The serving pod runs `trtllm-serve
<snapshot> --backend pytorch --host 0.0.0.0 --port 8000 --tp_size N --config ...`, with the model's claim
read-only, the YAML from the content ConfigMap, the Hub set offline (the snapshot is local) and a
writable home in an emptyDir. Probes use `/health`. The Service carries the OpenAI port and, as
`metrics`, the same port again: trtllm-serve serves `/prometheus/metrics` there.

The server fetches any http(s) image URL a client sends (docs/development/trtllm-serve-double.md), so without
`serving.networkPolicy` the pods get a policy that lets them connect nowhere but DNS; with it, the spec's
policy, on the one port. Pure: imports the api models, the plan, the shared builders and the vocabulary.
"""

from __future__ import annotations

from mmd_operator.desired import cache, network, serving
from mmd_operator.desired.children import Children, Manifest, Owner
from mmd_operator.plan.launch import HTTP_PORT, LAUNCH_ENV, METRICS_PORT
from mmd_operator.plan.settings import ENGINE_MOUNT
from mmd_operator.plan.trtllm_serve import (
    CONFIG_FILE,
    CONFIG_MOUNT,
    DOWNLOAD_CONTAINER,
    SERVER_CONTAINER,
    SOURCE_MOUNT,
    TrtllmServePlan,
)
from mmd_operator.vocabulary import labels, names

TOKEN_MOUNT = "/var/run/secrets/huggingface"
TOKEN_FILE = "token"
# trtllm-serve and the libraries under it cache kernels and configs in $HOME; the image's user has none.
HOME = "/home/trtllm-serve"
# Readable by the pod's group (fsGroup) and nobody else.
SECRET_MODE = 0o440
SERVE_PORTS = (("http", HTTP_PORT, "http"), ("metrics", METRICS_PORT, "http"))


def download_job(owned: Owner, plan: TrtllmServePlan) -> Manifest:
    """The Job that puts `plan`'s snapshot into the claim, with the resource as its first user."""
    download = plan.download
    assert download is not None, "a PersistentVolumeClaim source has no download"
    args = ["download", "--plan-json", download.model_dump_json(), "--cache-dir", ENGINE_MOUNT]
    mounts: list[Manifest] = []
    volumes: list[Manifest] = []
    hub = owned.resource.spec.model.source.huggingface
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
    assert plan.resources.job is not None, "a download has its pod's resources"
    # The download asks for no GPU.
    tail: Manifest = {"resources": plan.resources.job.manifest()}
    if owned.config.hf_endpoint:
        tail["env"] = [{"name": "HF_ENDPOINT", "value": owned.config.hf_endpoint}]
    return cache.artifact_job(
        owned,
        name=names.download_job(download.key, owned.claim),
        component=labels.WEIGHTS_DOWNLOAD,
        key=download.key,
        head={"name": DOWNLOAD_CONTAINER, "image": owned.config.builder_image, "args": args},
        mounts=mounts,
        tail=tail,
        volumes=volumes,
    )


def deployment(owned: Owner, plan: TrtllmServePlan, *, snapshot_key: str | None, configmap: str) -> Manifest:
    """The trtllm-serve Deployment serving `plan` (the snapshot `snapshot_key` in the claim)."""
    pvc = owned.resource.spec.model.source.pvc
    if pvc is None:
        model_mount = {"name": "engine-cache", "mountPath": ENGINE_MOUNT, "readOnly": True}
        model_volume = {
            "name": "engine-cache",
            "persistentVolumeClaim": {"claimName": owned.claim, "readOnly": True},
        }
    else:
        model_mount = {"name": "model-source", "mountPath": SOURCE_MOUNT, "readOnly": True}
        model_volume = {
            "name": "model-source",
            "persistentVolumeClaim": {"claimName": pvc.claim_name, "readOnly": True},
        }
    server = serving.server_container(
        owned,
        name=SERVER_CONTAINER,
        image=plan.serving_image,
        command=plan.argv(snapshot_key),
        env=[
            {"name": "HOME", "value": HOME},
            # The snapshot is local: the server must not reach for the Hub (the policy denies it anyway).
            {"name": "HF_HUB_OFFLINE", "value": "1"},
            {"name": "TRANSFORMERS_OFFLINE", "value": "1"},
            # TP > 1 spawns its ranks through Open MPI, whose PMIx store fails in containers without it.
            *({"name": key, "value": value} for key, value in sorted(LAUNCH_ENV.items())),
        ],
        ports=[("http", HTTP_PORT)],
        # /health answers 200 once the model is loaded (the socket is open, but serves nothing, before).
        health=("/health", "/health"),
        resources=plan.resources.serving,
        mounts=[
            model_mount,
            {"name": "repository-config", "mountPath": CONFIG_MOUNT, "readOnly": True},
            {"name": "home", "mountPath": HOME},
        ],
    )
    return serving.deployment(
        owned,
        cache_key=plan.cache_key,
        configmap=configmap,
        server=server,
        segments=plan.group_segments(snapshot_key),
        worker=plan.resources.worker,
        volumes=[
            model_volume,
            {"name": "repository-config", "configMap": {"name": configmap}},
            {"name": "home", "emptyDir": {}},
        ],
    )


def network_policy(owned: Owner) -> Manifest:
    """The serving pods' NetworkPolicy: the spec's on the one port, or egress to DNS only by default."""
    resource, namespace, owner = owned.resource, owned.namespace, owned.owner
    policy = network.network_policy(
        resource, namespace=namespace, owner=owner, inference_ports=(HTTP_PORT,), metrics_port=HTTP_PORT
    )
    if policy is not None:
        return policy
    dns = network.dns_egress(network.default_dns_selector())
    rules = {"policyTypes": ["Egress"], "egress": [dns]}
    return network.serving_policy(resource, rules, namespace=namespace, owner=owner)


def children(owned: Owner, plan: TrtllmServePlan) -> Children:
    """What this runtime makes for `owned`'s resource: the download Job, the `--config`, the server."""
    configmap = serving.content_configmap(owned, {CONFIG_FILE: plan.config_yaml}, cache_key=plan.cache_key)
    name = configmap["metadata"]["name"]
    download = plan.download
    return Children(
        uses_claim=download is not None,
        job_name=names.download_job(download.key, owned.claim) if download is not None else None,
        job=(lambda: download_job(owned, plan)) if download is not None else None,
        configmap=configmap,
        deployment=lambda location: deployment(owned, plan, snapshot_key=location, configmap=name),
        service=serving.service(owned, SERVE_PORTS),
        network_policy=network_policy(owned),
    )
