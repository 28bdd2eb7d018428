"""The triton-trtllm-engine runtime's children: build Job, model repository, tritonserver's Deployment.

The build Job runs the builder image's `python -m engine_builder build` with the plan as an argument
(plans never hold a secret; the Hugging Face token comes from its Secret as an environment variable) and
any model source claim read-only at `/sources/<role>`. The repository ConfigMap holds one `config.pbtxt`
per model. A serving pod assembles its repository in an init container: the Python model code shipped
in the serving image, the configs from the ConfigMap and the files some models load from the engine
cache entry (Whisper's tokenizer and mel filters); it refuses to start on an incomplete cache entry. A
second init container refuses an engine built for another kind of GPU than the pod's (`gpu_check`). The
main container runs the plan's exact launch argv, probed on `/v2/health/{ready,live}`; the Service
carries HTTP, gRPC and metrics. Pure: imports the api models, the plan, the shared builders and the
vocabulary.
"""

from __future__ import annotations

import shlex

from engine_builder.job_report import MANIFEST_NAME
from mmd_operator.api.v1alpha1 import VolumeSource
from mmd_operator.api.v1alpha1.rules import BUILD_SHARED_MEMORY
from mmd_operator.desired import cache, network, pods, serving
from mmd_operator.desired.children import Children, Manifest, Owner
from mmd_operator.desired.gpu_check import gpu_check_container
from mmd_operator.plan.build_plan import HF_TOKEN_ENV, SOURCES_MOUNT
from mmd_operator.plan.launch import GRPC_PORT, HTTP_PORT, METRICS_PORT
from mmd_operator.plan.settings import ENGINE_MOUNT, MODEL_REPOSITORY
from mmd_operator.plan.triton import ASSEMBLY_CONTAINER, BUILDER_CONTAINER, SERVER_CONTAINER, TritonPlan
from mmd_operator.vocabulary import labels, names

CONFIG_MOUNT = "/repository-config"
PORTS = (("http", HTTP_PORT), ("grpc", GRPC_PORT), ("metrics", METRICS_PORT))


def _source_volume(role: str, source: VolumeSource) -> tuple[Manifest, Manifest]:
    volume = {
        "name": f"source-{role}",
        "persistentVolumeClaim": {"claimName": source.claim_name, "readOnly": True},
    }
    mount = {"name": f"source-{role}", "mountPath": f"{SOURCES_MOUNT}/{role}", "readOnly": True}
    return volume, mount


def build_job(owned: Owner, plan: TritonPlan) -> Manifest:
    """The Job that builds `plan`'s engines into the claim, with the resource as its first user."""
    spec = owned.resource.spec
    mounts: list[Manifest] = [{"name": "shm", "mountPath": "/dev/shm"}]
    volumes: list[Manifest] = [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": BUILD_SHARED_MEMORY}}
    ]
    sources = [("model", spec.model.source.pvc)]
    if spec.model.lora is not None:
        sources.append(("lora", spec.model.lora.source.pvc))
    for role, source in sources:
        if source is not None:
            volume, mount = _source_volume(role, source)
            volumes.append(volume)
            mounts.append(mount)
    token = spec.model.source.huggingface.token_secret_ref if spec.model.source.huggingface else None
    env = (
        {
            "env": [
                {"name": HF_TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}}
            ]
        }
        if token is not None
        else {}
    )
    arguments = ["build", "--plan-json", plan.build.model_dump_json(exclude_defaults=False)]
    assert plan.resources.job is not None, "a build has its pod's resources"
    return cache.artifact_job(
        owned,
        name=names.build_job(plan.cache_key, owned.claim),
        component=labels.ENGINE_BUILD,
        key=plan.cache_key,
        head={
            "name": BUILDER_CONTAINER,
            "image": plan.build.builder_image,
            "args": [*arguments, "--cache-dir", ENGINE_MOUNT],
            "resources": plan.resources.job.manifest(),
        },
        mounts=mounts,
        tail=env,
        scheduling=pods.engine_build_scheduling(
            owned.resource.spec.build.pod, owned.resource.spec.serving.pod, plan.settings.gpu_selector()
        ),
        volumes=volumes,
    )


def repository_data(plan: TritonPlan) -> dict[str, str]:
    """The ConfigMap's data: one `<model>.pbtxt` per model directory."""
    return {f"{model}.pbtxt": text for model, text in sorted(plan.repository.configs.items())}


def assembly_script(plan: TritonPlan, code_dir: str) -> str:
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


def deployment(owned: Owner, plan: TritonPlan, *, repository: str) -> Manifest:
    """The tritonserver Deployment serving `plan` from the repository ConfigMap `repository`."""
    image = plan.settings.serving_image
    assert plan.resources.helper is not None, "the repository's assembly has its container's resources"
    code_dir = owned.resource.spec.serving.model_code_path or owned.config.model_code_path
    mounts: list[Manifest] = [
        {"name": "model-repository", "mountPath": MODEL_REPOSITORY},
        {"name": "engine-cache", "mountPath": ENGINE_MOUNT, "readOnly": True},
    ]
    server = serving.server_container(
        owned,
        name=SERVER_CONTAINER,
        image=image,
        command=plan.launch.argv,
        env=[{"name": key, "value": value} for key, value in sorted(plan.launch.env.items())],
        ports=PORTS,
        health=("/v2/health/ready", "/v2/health/live"),
        mounts=mounts,
        resources=plan.resources.serving,
    )
    assemble = {
        "name": ASSEMBLY_CONTAINER,
        "image": image,
        "command": ["/bin/sh", "-c", assembly_script(plan, code_dir)],
        "volumeMounts": [*mounts, {"name": "repository-config", "mountPath": CONFIG_MOUNT, "readOnly": True}],
        "resources": plan.resources.helper.manifest(),
        "securityContext": pods.container_security_context(),
    }
    check = gpu_check_container(
        image=image,
        entry=f"{ENGINE_MOUNT}/{plan.cache_key}",
        cache_key=plan.cache_key,
        helper=plan.resources.helper,
        gpus=plan.resources.serving.gpus,
        mounts=[{"name": "engine-cache", "mountPath": ENGINE_MOUNT, "readOnly": True}],
    )
    return serving.deployment(
        owned,
        cache_key=plan.cache_key,
        configmap=repository,
        server=server,
        segments=plan.launch.group_segments,
        init_containers=[assemble, check],
        worker=plan.resources.worker,
        gpu_selector=plan.settings.gpu_selector(),
        volumes=[
            {"name": "model-repository", "emptyDir": {}},
            {"name": "repository-config", "configMap": {"name": repository}},
            {"name": "engine-cache", "persistentVolumeClaim": {"claimName": owned.claim, "readOnly": True}},
        ],
    )


def children(owned: Owner, plan: TritonPlan) -> Children:
    """What this runtime makes for `owned`'s resource: the build Job, the repository, the server."""
    configmap = serving.content_configmap(owned, repository_data(plan), cache_key=plan.cache_key)
    repository = configmap["metadata"]["name"]
    return Children(
        uses_claim=True,
        job_name=names.build_job(plan.cache_key, owned.claim),
        job=lambda: build_job(owned, plan),
        configmap=configmap,
        # The engine lies under its cacheKey, which the plan knows.
        deployment=lambda _location: deployment(owned, plan, repository=repository),
        service=serving.service(owned, [(name, port, name) for name, port in PORTS]),
        network_policy=network.network_policy(owned.resource, namespace=owned.namespace, owner=owned.owner),
    )
