"""What both runtimes' serving objects share: the content ConfigMap, the Deployment's shape, probes, Service.

The pods' configuration (the model repository, or trtllm-serve's `--config`) is an immutable ConfigMap
named after a digest of its content, so a different configuration is a new ConfigMap, and its new name in
the pod template rolls the pods. Probes: a startup budget the user sets (loading a model takes minutes),
then readiness and liveness on the server's health paths. A rollout starts each new pod beside the old
ones (a surge of one) unless the spec asks for in place or the judgement found no room for the surge pod
(`judgement.rollout`): then one old pod stops before its replacement starts. A Canary rollout first
runs the new revision as one pod of a second Deployment (`canary_deployment`) behind the same Service.
A pod leaving waits until its Service stops sending to it before the server is told to stop, then has
the server's own drain time for the requests it holds.
The Deployment and the Service share a name and belong to the resource alone; the server container's
CPU and memory are the plan's (`plan.pod_resources`). What differs by the replica's shape (one pod, a
group: `groups`) is its row of `WORKLOADS`, looked up by the shape or by the workload's kind, never asked
otherwise. Pure: imports the api models, the pods' settings, the plan's launch segments and pod
resources, the rollout's annotation and the vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from mmd_operator.api.v1alpha1 import MultimodalDeployment, Parallelism, ReplicaShape
from mmd_operator.desired import groups, pods
from mmd_operator.desired.children import Manifest, Owner, Workload
from mmd_operator.facts import OwnerRef
from mmd_operator.judgement.rollout import IN_PLACE_BECAUSE
from mmd_operator.plan.launch import Segment
from mmd_operator.plan.pod_resources import PodResources
from mmd_operator.vocabulary import hashing, kinds, labels, names, ownership

# The API server refuses objects over 1 MiB; keep room for the ConfigMap's metadata.
CONFIGMAP_DATA_LIMIT = 1_000_000
STARTUP_PERIOD_SECONDS = 10
# The Deployment controller reports ProgressDeadlineExceeded this long after the startup budget.
PROGRESS_MARGIN_SECONDS = 300
# A deleted pod stays in its Service's endpoints until kube-proxy (or a load balancer) catches up; a
# server told to stop before then answers new requests with an error. So the pod waits first.
ENDPOINT_DRAIN_SECONDS = 5
# tritonserver waits this long (its --exit-timeout-secs default) for requests in flight after SIGTERM.
SERVER_EXIT_SECONDS = 30
# A hung server drains nothing: a liveness kill gets the endpoint wait and a short stop.
LIVENESS_KILL_GRACE_SECONDS = ENDPOINT_DRAIN_SECONDS + 5
# The serving pods' shared memory (a Memory emptyDir at /dev/shm, sized by the spec).
SHM_VOLUME = "shm"


def configmap_size(data: dict[str, str]) -> int:
    """Bytes the data takes in the stored object."""
    return sum(len(key.encode()) + len(value.encode()) for key, value in data.items())


def content_configmap(owned: Owner, data: dict[str, str], *, cache_key: str) -> Manifest:
    """An immutable ConfigMap of the resource's `data`, named after its digest, controlled by the resource."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": names.repository(owned.instance, hashing.digest(data)),
            "namespace": owned.namespace,
            "labels": {
                **labels.for_instance(owned.instance, labels.MODEL_REPOSITORY),
                labels.CACHE_KEY: cache_key,
            },
            "ownerReferences": [ownership.owner_reference(owned.owner, controller=True)],
        },
        "immutable": True,
        "data": data,
    }


# The revision a Deployment was taken back from (it could not start).
UNDONE_REVISION = f"{labels.PREFIX}/undone-revision"
SURGE = {"maxSurge": 1, "maxUnavailable": 0}
IN_PLACE = {"maxSurge": 0, "maxUnavailable": 1}


def rolling_in_place(manifest: Manifest, because: str) -> Manifest:
    """`manifest`, the serving workload, rolling in place for the rest of its rollout, and why."""
    metadata = manifest["metadata"]
    key, rolling = workload_of(manifest["kind"]).rollout
    return {
        **manifest,
        "metadata": {
            **metadata,
            "annotations": {**metadata.get("annotations", {}), IN_PLACE_BECAUSE: because},
        },
        "spec": {**manifest["spec"], key: {"type": "RollingUpdate", rolling: dict(IN_PLACE)}},
    }


def undone(manifest: Manifest, template: Manifest, failed: str) -> Manifest:
    """`manifest`, the serving workload, with the `template` of the last Ready revision back.

    A Deployment's pod template; a LeaderWorkerSet's `leaderWorkerTemplate` (both of its pod templates).
    """
    metadata = manifest["metadata"]
    # The revision it runs is the stable one's, not the one rendered: a retry of the latter is a change.
    annotations = {
        **metadata.get("annotations", {}),
        UNDONE_REVISION: failed,
        labels.TEMPLATE_DIGEST: hashing.digest(template),
    }
    return {
        **manifest,
        "metadata": {**metadata, "annotations": annotations},
        "spec": {**manifest["spec"], workload_of(manifest["kind"]).template: template},
    }


def template_digest(manifest: Manifest) -> str:
    """The revision a serving Deployment `manifest` runs: the digest of its pod template as rendered."""
    return str(manifest["metadata"]["annotations"][labels.TEMPLATE_DIGEST])


def canary_deployment(manifest: Manifest) -> Manifest:
    """A Deployment of one pod of `manifest`'s revision beside the stable pods, behind the same Service.

    Its pods carry the serving labels the Service selects, and the track label, which its selector
    adds; the serving Deployment's ReplicaSets leave them alone, since each pod names its controller.
    With a replica across pods, a LeaderWorkerSet of one group.
    """
    name = names.canary(manifest["metadata"]["labels"][labels.INSTANCE])
    return workload_of(manifest["kind"]).canary(manifest, name, {labels.TRACK: labels.CANARY})


def _canary_deployment(manifest: Manifest, name: str, track: dict[str, str]) -> Manifest:
    metadata, spec = manifest["metadata"], manifest["spec"]
    template = spec["template"]
    return {
        **manifest,
        "metadata": {**metadata, "name": name},
        "spec": {
            **{key: value for key, value in spec.items() if key != "strategy"},
            "replicas": 1,
            "selector": {"matchLabels": {**spec["selector"]["matchLabels"], **track}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": dict(SURGE)},
            "template": {
                **template,
                "metadata": {**template["metadata"], "labels": {**template["metadata"]["labels"], **track}},
            },
        },
    }


def deployment_replicas(resource: MultimodalDeployment) -> dict[str, int]:
    """`replicas` of the Deployment's spec: the spec's, or nothing while an autoscaler sets it (`scaling`)."""
    serving = resource.spec.serving
    return {} if serving.autoscaling is not None else {"replicas": serving.replicas}


def serving_metadata(instance: str, namespace: str, owner: OwnerRef) -> Manifest:
    """Metadata of the Deployment and the Service, which share a name and belong to `instance` alone."""
    return {
        "name": names.serving(instance),
        "namespace": namespace,
        "labels": labels.for_instance(instance, labels.SERVING),
        "ownerReferences": [ownership.owner_reference(owner, controller=True)],
    }


def probes(resource: MultimodalDeployment, *, ready_path: str, live_path: str) -> Manifest:
    """The startup, readiness and liveness probes of the server container, on the `http` port."""
    probes = resource.spec.serving.probes
    timeout = probes.liveness_timeout_seconds
    ready = {"httpGet": {"path": ready_path, "port": "http"}, "timeoutSeconds": timeout}
    return {
        # Until the first success the other probes do not run: the budget covers loading the model.
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


def server_container(
    owned: Owner,
    *,
    name: str,
    image: str,
    command: Sequence[str],
    env: Sequence[Manifest],
    ports: Sequence[tuple[str, int]],
    health: tuple[str, str],
    mounts: Sequence[Manifest],
    resources: PodResources,
) -> Manifest:
    """The serving container: `command` with one pod's GPUs, probed on its (ready, live) `health` paths."""
    ready_path, live_path = health
    return {
        "name": name,
        "image": image,
        "command": list(command),
        "env": list(env),
        "ports": [{"name": port, "containerPort": number, "protocol": "TCP"} for port, number in ports],
        "resources": resources.manifest(),
        **probes(owned.resource, ready_path=ready_path, live_path=live_path),
        "lifecycle": {"preStop": {"sleep": {"seconds": ENDPOINT_DRAIN_SECONDS}}},
        "volumeMounts": [*mounts, {"name": SHM_VOLUME, "mountPath": "/dev/shm"}],
        "securityContext": pods.container_security_context(),
    }


def deployment(
    owned: Owner,
    *,
    cache_key: str,
    configmap: str,
    server: Manifest,
    volumes: Sequence[Manifest],
    segments: Sequence[Segment],
    init_containers: Sequence[Manifest] = (),
    worker: PodResources | None = None,
    gpu_selector: Mapping[str, str] = MappingProxyType({}),
) -> Manifest:
    """The serving Deployment of `server`, its pods marked with `cache_key` and mounting `configmap`.

    With a replica across pods, the LeaderWorkerSet of the same pods (`groups`), whose leaders run the
    world's `segments` and whose workers' server containers have the `worker` resources (the plan's, for
    a shape with workers). `gpu_selector` keeps the pods on the kind of GPU their engine is built for.
    """
    serving = owned.resource.spec.serving
    pod_labels = {**labels.for_instance(owned.instance, labels.SERVING), labels.CACHE_KEY: cache_key}
    pod_spec: Manifest = {
        **pods.scheduling(serving.pod, gpu_selector),
        **pods.NO_API_TOKEN,
        "securityContext": pods.pod_security_context(),
        "terminationGracePeriodSeconds": ENDPOINT_DRAIN_SECONDS + SERVER_EXIT_SECONDS + 5,
        **({"initContainers": list(init_containers)} if init_containers else {}),
        "containers": [server],
        "volumes": [
            *volumes,
            {
                "name": SHM_VOLUME,
                "emptyDir": {"medium": "Memory", "sizeLimit": str(serving.shared_memory_size)},
            },
        ],
    }
    template = {
        "metadata": pods.pod_metadata(serving.pod, pod_labels, {labels.REPOSITORY: configmap}),
        "spec": pod_spec,
    }
    metadata = serving_metadata(owned.instance, owned.namespace, owned.owner)
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**metadata, "annotations": {labels.TEMPLATE_DIGEST: hashing.digest(template)}},
        "spec": {
            **deployment_replicas(owned.resource),
            "selector": {"matchLabels": labels.serving_selector(owned.instance)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": dict(IN_PLACE if serving.rollout.strategy == "InPlace" else SURGE),
            },
            "progressDeadlineSeconds": serving.probes.startup_timeout_seconds + PROGRESS_MARGIN_SECONDS,
            "revisionHistoryLimit": 3,
            "template": template,
        },
    }
    parallelism = owned.resource.spec.parallelism
    resources = None if worker is None else worker.manifest()
    return WORKLOADS[parallelism.shape].made(manifest, parallelism, segments, resources)


def service(owned: Owner, ports: Sequence[tuple[str, int, str]]) -> Manifest:
    """The Service in front of the serving pods, with `ports` as (name, port, target port).

    With a replica across pods it selects the groups' leaders, which serve; their workers have no port.
    """
    leaders = WORKLOADS[owned.resource.spec.parallelism.shape].serving_pods
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": serving_metadata(owned.instance, owned.namespace, owned.owner),
        "spec": {
            "type": "ClusterIP",
            "selector": {**labels.serving_selector(owned.instance), **leaders},
            "ports": [
                {"name": name, "port": port, "targetPort": target, "protocol": "TCP"}
                for name, port, target in ports
            ],
        },
    }


def _as_rendered(
    deployment: Manifest, _parallelism: Parallelism, _segments: Sequence[Segment], _worker: Manifest | None
) -> Manifest:
    return deployment


def _same_rules(_instance: str, rules: Manifest) -> Manifest:
    return rules


def _no_secrets(_instance: str, _namespace: str, _owner: OwnerRef) -> list[Manifest]:
    return []


def _deployment_pod(manifest: Manifest) -> Manifest:
    spec: Manifest = manifest["spec"]["template"]["spec"]
    return spec


# The serving workload of a replica of one pod: the runtime's Deployment as it is.
ONE_POD = Workload(
    kind=kinds.DEPLOYMENT,
    name=names.serving,
    made=_as_rendered,
    serving_pods=MappingProxyType({}),
    policy_rules=_same_rules,
    claim_access=None,
    secrets=_no_secrets,
    rollout=("strategy", "rollingUpdate"),
    template="template",
    canary=_canary_deployment,
    serving_pod=_deployment_pod,
)

# Each replica shape's serving workload: a third shape is one row here (and its member of `ReplicaShape`).
WORKLOADS: Mapping[ReplicaShape, Workload] = MappingProxyType(
    {ReplicaShape.ONE_POD: ONE_POD, ReplicaShape.GROUP: groups.GROUP}
)
_BY_KIND = MappingProxyType({workload.kind.kind: workload for workload in WORKLOADS.values()})


def workload_of(kind: str) -> Workload:
    """The row of the serving workload of `kind` (a manifest's or an observed object's)."""
    return _BY_KIND[kind]
