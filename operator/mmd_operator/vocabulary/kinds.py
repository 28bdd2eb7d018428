"""Every kind the operator touches and where it lives in the API, in one table; the GPU resource name.

The GPU resource name is defined with the API, whose validation rules name it. Pure; imports the api
models (for the MultimodalDeployment's own coordinates).
"""

from __future__ import annotations

from dataclasses import dataclass

from mmd_operator.api.v1alpha1 import API_VERSION, KIND, PLURAL
from mmd_operator.api.v1alpha1 import GPU_RESOURCE as GPU_RESOURCE


@dataclass(frozen=True)
class ApiKind:
    """A kind with its API coordinates."""

    api_version: str
    kind: str
    plural: str

    @property
    def group(self) -> str:
        """The API group ("" for the core group)."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        """The version within the group."""
        return self.api_version.rpartition("/")[2]


MULTIMODAL_DEPLOYMENT = ApiKind(API_VERSION, KIND, PLURAL)
CONFIGMAP = ApiKind("v1", "ConfigMap", "configmaps")
CLAIM = ApiKind("v1", "PersistentVolumeClaim", "persistentvolumeclaims")
SERVICE = ApiKind("v1", "Service", "services")
POD = ApiKind("v1", "Pod", "pods")
SECRET = ApiKind("v1", "Secret", "secrets")
EVENT = ApiKind("v1", "Event", "events")
JOB = ApiKind("batch/v1", "Job", "jobs")
DEPLOYMENT = ApiKind("apps/v1", "Deployment", "deployments")
# Read only to undo a revision that cannot start (`judgement.revisions`): a ReplicaSet by name, a
# LeaderWorkerSet's ControllerRevisions by label.
REPLICA_SET = ApiKind("apps/v1", "ReplicaSet", "replicasets")
CONTROLLER_REVISION = ApiKind("apps/v1", "ControllerRevision", "controllerrevisions")
NETWORK_POLICY = ApiKind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies")
HORIZONTAL_POD_AUTOSCALER = ApiKind("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers")
POD_DISRUPTION_BUDGET = ApiKind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets")
# Listed only while a Job or the serving workload lacks pods, to name the quota that refuses them.
RESOURCE_QUOTA = ApiKind("v1", "ResourceQuota", "resourcequotas")
# The serving workload of a replica across pods: its CRD comes with the LeaderWorkerSet controller.
LEADER_WORKER_SET = ApiKind("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets")
# The one Lease of leader election (`kube.lease`).
LEASE = ApiKind("coordination.k8s.io/v1", "Lease", "leases")
# Cluster-scoped, and only read: nodes (for scheduling messages and `mmctl validate --cluster`),
# StorageClasses and Namespaces (for the preflight alone).
NODE = ApiKind("v1", "Node", "nodes")
STORAGE_CLASS = ApiKind("storage.k8s.io/v1", "StorageClass", "storageclasses")
NAMESPACE = ApiKind("v1", "Namespace", "namespaces")
# Dynamic Resource Allocation, for a resource that asks for its GPUs by claim (`spec.gpus.resourceClaim`):
# the template the operator makes for its pods, and (cluster-scoped, only read) the devices the drivers
# publish and their classes.
RESOURCE_CLAIM_TEMPLATE = ApiKind("resource.k8s.io/v1", "ResourceClaimTemplate", "resourceclaimtemplates")
RESOURCE_SLICE = ApiKind("resource.k8s.io/v1", "ResourceSlice", "resourceslices")
DEVICE_CLASS = ApiKind("resource.k8s.io/v1", "DeviceClass", "deviceclasses")

ALL = (
    MULTIMODAL_DEPLOYMENT,
    CONFIGMAP,
    CLAIM,
    SERVICE,
    POD,
    SECRET,
    EVENT,
    JOB,
    DEPLOYMENT,
    REPLICA_SET,
    CONTROLLER_REVISION,
    NETWORK_POLICY,
    HORIZONTAL_POD_AUTOSCALER,
    POD_DISRUPTION_BUDGET,
    RESOURCE_QUOTA,
    LEADER_WORKER_SET,
    LEASE,
    NODE,
    STORAGE_CLASS,
    NAMESPACE,
    RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_SLICE,
    DEVICE_CLASS,
)
