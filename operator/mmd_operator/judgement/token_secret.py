"""The Hugging Face token Secret a spec names: missing, or without its key, in the kubelet's words.

The operator reads no Secret (a `get` on every Secret of every namespace would be a read of every token
in the cluster). The kubelet reads the token when it starts the Job's pod, and when the Secret or its key
is missing it keeps the pod waiting, tries again by itself, and says why, in words that name the Secret
(kubelet v1.34 sources):

- a variable from a `secretKeyRef` (the build pod): the container waits in CreateContainerConfigError
  with `secret "<name>" not found`, or `couldn't find key <key> in Secret <namespace>/<name>`
  (pkg/kubelet/kubelet_pods.go, `makeEnvironmentVariables`);
- a secret volume (the download pod): the container waits in ContainerCreating, and the kubelet posts a
  FailedMount Event on the pod, `MountVolume.SetUp failed for volume "<volume>" : secret "<name>" not
  found`, or `... : references non-existent secret key: <key>` (pkg/volume/secret/secret.go).

`refusal` reads those words as the missing reference the status reports (SecretNotFound,
SecretKeyNotFound); `mmctl validate --cluster` reads the Secret itself, with the user's rights, and says
the same (`not_found`, `key_not_found`). Pure: imports the api models and the facts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from mmd_operator.api.v1alpha1 import MultimodalDeploymentSpec, SecretKeyRef
from mmd_operator.facts import Missing, MissingReference, PodFacts, PodPhase

FIELD = "spec.model.source.huggingface.tokenSecretRef"
# The waiting reason while the kubelet mounts the pod's volumes (and pulls its images).
CREATING = "ContainerCreating"
# The reason of the kubelet's Event when it cannot mount a volume.
FAILED_MOUNT = "FailedMount"


def token_of(spec: MultimodalDeploymentSpec) -> SecretKeyRef | None:
    """The token Secret key the spec names for its Job, if any."""
    hub = spec.model.source.huggingface
    return hub.token_secret_ref if hub is not None else None


def not_found(token: SecretKeyRef, namespace: str) -> MissingReference:
    """The token Secret does not exist in `namespace`."""
    return MissingReference(
        Missing.SECRET,
        FIELD,
        f"Secret {token.name} not found in namespace {namespace}",
        f"create it with kubectl create secret generic {token.name} -n {namespace} "
        f"--from-literal={token.key}=<your Hugging Face token>",
    )


def key_not_found(token: SecretKeyRef) -> MissingReference:
    """The token Secret exists without the key the spec names."""
    return MissingReference(
        Missing.SECRET_KEY,
        FIELD,
        f"Secret {token.name} has no key {token.key}",
        f"add the key to the Secret, or name one it has in {FIELD}.key",
    )


def refusal(token: SecretKeyRef, namespace: str, pod: str, said: Iterable[str]) -> MissingReference | None:
    """The missing Secret or key the kubelet's messages `said` about `pod` report, if they report one."""
    missing = f'secret "{token.name}" not found'
    no_key = (
        f"couldn't find key {token.key} in Secret {namespace}/{token.name}",
        f"references non-existent secret key: {token.key}",
    )
    for message in said:
        # A container's message is the error itself; a FailedMount Event's ends with it.
        error = message.rpartition(" : ")[2]
        found = not_found(token, namespace) if error == missing else None
        if error in no_key:
            found = key_not_found(token)
        if found is not None:
            waits = f"; pod {pod} waits for it (the kubelet starts it once it is there)"
            return dataclasses.replace(found, message=found.message + waits)
    return None


def waiting_pods(pods: Iterable[PodFacts]) -> list[PodFacts]:
    """The Job's pods the kubelet holds before their containers start (scheduled, Pending, waiting)."""
    return [
        pod
        for pod in pods
        if pod.phase is PodPhase.PENDING and pod.node and pod.waiting and not pod.meta.deleting
    ]


def mounting(pod: PodFacts) -> bool:
    """Whether the kubelet is still setting `pod` up: every container waits in ContainerCreating."""
    return all(reason == CREATING for reason, _ in pod.waiting)
