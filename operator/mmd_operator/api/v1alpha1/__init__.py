"""The `serving.multimodal.dev/v1alpha1` MultimodalDeployment resource, as pydantic models.

These models are the single source of the CRD schema (see `crdgen`). Field docstrings become the
descriptions `kubectl explain` shows. Cross-field rules are written once, in CEL, on the models
(`x-kubernetes-validations`, built by `cel_rule`, with messages that name the values they compared): the
API server enforces them at admission and `validation` evaluates the same expressions offline. This
module only re-exports the names other packages read: the resource and its status, and the parts of the
spec they use; the rest is imported from its module. Each module imports only modules listed above it,
and of the rest only pydantic, `mmd_operator.knowledge` and `mmd_operator.scaling_metrics`. Pure, no I/O.

- `cel`: `cel_rule` and `cel_list`, CEL rule entries whose messages name the values they compared;
- `parallelism`: the world of one replica, its default GPUs per pod (in Python and CEL), its shape;
- `schema`: the base model, the name and quantity patterns, the `Quantity` and `StringMap` field types;
- `pods`: the Kubernetes shapes the spec borrows (references, tolerations, resources, `PodSettings`);
- `serving`: `spec.serving` and its parts (queue, instances, LoRA cache, NetworkPolicy, autoscaling);
- `rules`: the cross-field CEL rules of the whole spec (model types, runtimes, autoscaling);
- `spec`: the model, its engine build and engine cache, and `MultimodalDeploymentSpec`;
- `status`: `MultimodalDeploymentStatus` and its parts (conditions, phase, engine, weights);
- `resource`: the group, version, kind and names, and `MultimodalDeployment`, the whole object.
"""

from mmd_operator.api.v1alpha1.cel import FORBIDDEN as FORBIDDEN
from mmd_operator.api.v1alpha1.cel import REQUIRED as REQUIRED
from mmd_operator.api.v1alpha1.cel import cel_rule as cel_rule
from mmd_operator.api.v1alpha1.parallelism import Parallelism as Parallelism
from mmd_operator.api.v1alpha1.parallelism import ReplicaShape as ReplicaShape
from mmd_operator.api.v1alpha1.pods import GPU_RESOURCE as GPU_RESOURCE
from mmd_operator.api.v1alpha1.pods import PodSettings as PodSettings
from mmd_operator.api.v1alpha1.pods import ResourceRequirements as ResourceRequirements
from mmd_operator.api.v1alpha1.pods import SecretKeyRef as SecretKeyRef
from mmd_operator.api.v1alpha1.resource import API_VERSION as API_VERSION
from mmd_operator.api.v1alpha1.resource import GROUP as GROUP
from mmd_operator.api.v1alpha1.resource import KIND as KIND
from mmd_operator.api.v1alpha1.resource import MAX_NAME_LENGTH as MAX_NAME_LENGTH
from mmd_operator.api.v1alpha1.resource import PLURAL as PLURAL
from mmd_operator.api.v1alpha1.resource import SHORT_NAMES as SHORT_NAMES
from mmd_operator.api.v1alpha1.resource import SINGULAR as SINGULAR
from mmd_operator.api.v1alpha1.resource import VERSION as VERSION
from mmd_operator.api.v1alpha1.resource import MultimodalDeployment as MultimodalDeployment
from mmd_operator.api.v1alpha1.schema import DNS_LABEL_PATTERN as DNS_LABEL_PATTERN
from mmd_operator.api.v1alpha1.schema import DNS_SUBDOMAIN_PATTERN as DNS_SUBDOMAIN_PATTERN
from mmd_operator.api.v1alpha1.schema import QUANTITY_HINT as QUANTITY_HINT
from mmd_operator.api.v1alpha1.schema import QUANTITY_PATTERN as QUANTITY_PATTERN
from mmd_operator.api.v1alpha1.serving import AutoscalingSpec as AutoscalingSpec
from mmd_operator.api.v1alpha1.serving import CanarySpec as CanarySpec
from mmd_operator.api.v1alpha1.serving import LabelSelector as LabelSelector
from mmd_operator.api.v1alpha1.serving import NetworkPolicySpec as NetworkPolicySpec
from mmd_operator.api.v1alpha1.serving import NetworkPort as NetworkPort
from mmd_operator.api.v1alpha1.spec import ModelSource as ModelSource
from mmd_operator.api.v1alpha1.spec import MultimodalDeploymentSpec as MultimodalDeploymentSpec
from mmd_operator.api.v1alpha1.spec import VolumeSource as VolumeSource
from mmd_operator.api.v1alpha1.status import MAX_WARNINGS as MAX_WARNINGS
from mmd_operator.api.v1alpha1.status import WARNING_MAX_LENGTH as WARNING_MAX_LENGTH
from mmd_operator.api.v1alpha1.status import ArtifactProgress as ArtifactProgress
from mmd_operator.api.v1alpha1.status import AutoscalingStatus as AutoscalingStatus
from mmd_operator.api.v1alpha1.status import CanaryFigures as CanaryFigures
from mmd_operator.api.v1alpha1.status import CanaryStatus as CanaryStatus
from mmd_operator.api.v1alpha1.status import CanaryVerdict as CanaryVerdict
from mmd_operator.api.v1alpha1.status import Condition as Condition
from mmd_operator.api.v1alpha1.status import ConditionStatus as ConditionStatus
from mmd_operator.api.v1alpha1.status import DerivedLimits as DerivedLimits
from mmd_operator.api.v1alpha1.status import Endpoints as Endpoints
from mmd_operator.api.v1alpha1.status import EngineSource as EngineSource
from mmd_operator.api.v1alpha1.status import EngineStatus as EngineStatus
from mmd_operator.api.v1alpha1.status import GpuStatus as GpuStatus
from mmd_operator.api.v1alpha1.status import MultimodalDeploymentStatus as MultimodalDeploymentStatus
from mmd_operator.api.v1alpha1.status import Phase as Phase
from mmd_operator.api.v1alpha1.status import RevisionStatus as RevisionStatus
from mmd_operator.api.v1alpha1.status import RollbackStatus as RollbackStatus
from mmd_operator.api.v1alpha1.status import ServingRevision as ServingRevision
from mmd_operator.api.v1alpha1.status import WeightsSource as WeightsSource
from mmd_operator.api.v1alpha1.status import WeightsStatus as WeightsStatus
