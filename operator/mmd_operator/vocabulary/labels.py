"""Label and annotation keys on everything the operator creates, defined once.

Recommended `app.kubernetes.io/*` labels name what an object is; our own keys under the API group carry
what the operator needs to find its children again (which resource, which cacheKey) and what it last
applied. Pure constants and small helpers; imports nothing.
"""

from __future__ import annotations

PREFIX = "serving.multimodal.dev"

NAME = "app.kubernetes.io/name"
INSTANCE = "app.kubernetes.io/instance"
COMPONENT = "app.kubernetes.io/component"
PART_OF = "app.kubernetes.io/part-of"
MANAGED_BY = "app.kubernetes.io/managed-by"

APP_NAME = "multimodal-deployment"
OPERATOR = "mmd-operator"

# Components: what an object does for a MultimodalDeployment.
ENGINE_CACHE = "engine-cache"
ENGINE_INDEX = "engine-index"
ENGINE_BUILD = "engine-build"
WEIGHTS_DOWNLOAD = "weights-download"
MODEL_REPOSITORY = "model-repository"
SERVING = "serving"

# The cacheKey a build Job (and its pods) produces, or the download key of a weights download Job; shared by
# every resource with that key.
CACHE_KEY = f"{PREFIX}/cache-key"
# The engine-cache claim a build writes into or an index describes.
ENGINE_CACHE_CLAIM = f"{PREFIX}/engine-cache"
# Digest of the manifest the operator last applied to an object: equal digest, nothing to write.
APPLIED_HASH = f"{PREFIX}/applied-hash"
# Digest of a build Job's spec (its recipe: pod settings, retries), which the cacheKey does not cover.
BUILD_RECIPE = f"{PREFIX}/build-recipe"
# The rendered repository a serving pod assembled (a new one rolls the pods).
REPOSITORY = f"{PREFIX}/model-repository"
# Digest of a serving Deployment's pod template as the operator rendered it: the revision it runs.
TEMPLATE_DIGEST = f"{PREFIX}/template-digest"
# On the pods of a Canary rollout's new revision (`TRACK: CANARY`); the stable pods have no such label.
TRACK = f"{PREFIX}/track"
CANARY = "canary"

# Set by the controllers that run the serving pods, read back by the operator. The Deployment controller's
# label on the pods of each ReplicaSet (`<deployment>-<hash>`), which names their revision:
DEPLOYMENT_REVISION = "pod-template-hash"
# The LeaderWorkerSet controller's: the set's name on its ControllerRevisions, the revision of a group's
# pods (and of the ControllerRevision that holds its template), the group's index and the pod's within it
# (the leader is worker 0).
GROUP_SET = "leaderworkerset.sigs.k8s.io/name"
GROUP_REVISION = "leaderworkerset.sigs.k8s.io/template-revision-hash"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def common(component: str) -> dict[str, str]:
    """Labels every object of `component` carries."""
    return {NAME: APP_NAME, COMPONENT: component, MANAGED_BY: OPERATOR}


def for_instance(instance: str, component: str) -> dict[str, str]:
    """Labels of an object that belongs to one MultimodalDeployment."""
    return {**common(component), INSTANCE: instance, PART_OF: instance}


def serving_selector(instance: str) -> dict[str, str]:
    """Labels that select the serving pods of `instance` (a Deployment selector never changes)."""
    return {INSTANCE: instance, COMPONENT: SERVING, MANAGED_BY: OPERATOR}
