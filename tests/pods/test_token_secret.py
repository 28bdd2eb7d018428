"""A missing token Secret on real nodes: the kubelet holds the Job's pod and says why, the operator (from
the chart, reading no Secret) reports it, and the pod starts by itself once the Secret is there.

The build pod takes the token as a `secretKeyRef` variable: its container waits in
CreateContainerConfigError. The download pod mounts it as a volume: the kubelet posts FailedMount Events.
Each time the kubelet's words are checked against `tests.support.kubelet`, which the unit tests and the
kwok tier (where the test writes them) rely on.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import kubelet
from tests.support.kube import Kube, Resources
from tests.support.pods import example

pytestmark = pytest.mark.pods
FIELD = "spec.model.source.huggingface.tokenSecretRef"
# The kubelet retries a failed mount with a backoff that grows to about two minutes.
KUBELET_RETRY = 240


def _job_pod(kube: Kube, namespace: str, component: str) -> Any:
    pods = kube.core.list_namespaced_pod(namespace, label_selector=f"app.kubernetes.io/component={component}")
    return pods.items[0] if pods.items else None


def _waiting(pod: Any) -> tuple[str, str] | None:
    for status in pod.status.container_statuses or []:
        if status.state.waiting is not None:
            return status.state.waiting.reason, status.state.waiting.message or ""
    return None


def _reason(resources: Resources, name: str, reason: str, timeout: float) -> dict[str, Any]:
    resources.kube.wait_for(
        f"{name} to say {reason}",
        lambda: resources.condition(name, "Ready").get("reason") == reason,
        timeout=timeout,
    )
    return resources.condition(name, "Ready")


def _failed_mounts(kube: Kube, namespace: str, pod: Any) -> list[str]:
    events = kube.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.uid={pod.metadata.uid},reason=FailedMount"
    ).items
    return [event.message for event in events]


def test_the_kubelet_holds_the_build_pod_for_its_token_and_the_operator_says_so(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    resources.apply(example("mllama"))  # the token: Secret huggingface, key token
    ready = _reason(resources, "mllama", "SecretNotFound", timeout=300)
    pod = _job_pod(kube, namespace, "engine-build")
    assert _waiting(pod) == ("CreateContainerConfigError", kubelet.secret_not_found("huggingface"))
    assert ready["message"] == (
        f"{FIELD}: Secret huggingface not found in namespace {namespace}; pod {pod.metadata.name} waits for "
        f"it (the kubelet starts it once it is there): create it with kubectl create secret generic "
        f"huggingface -n {namespace} --from-literal=token=<your Hugging Face token>."
    )

    kube.core.create_namespaced_secret(
        namespace, {"metadata": {"name": "huggingface"}, "stringData": {"other": "x"}}
    )
    _reason(resources, "mllama", "SecretKeyNotFound", timeout=KUBELET_RETRY)
    pod = _job_pod(kube, namespace, "engine-build")
    assert _waiting(pod) == (
        "CreateContainerConfigError",
        kubelet.env_key_not_found("token", namespace, "huggingface"),
    )

    kube.core.patch_namespaced_secret(
        "huggingface", namespace, {"stringData": {"token": "hf_not_a_real_token"}}
    )
    kube.wait_for(
        "the kubelet to start the build pod",
        lambda: _waiting(_job_pod(kube, namespace, "engine-build")) is None,
        timeout=KUBELET_RETRY,
    )
    kube.wait_for(
        "the operator to stop reporting the Secret",
        lambda: (
            resources.condition("mllama", "Ready").get("reason")
            not in ("SecretNotFound", "SecretKeyNotFound")
        ),
    )


def test_the_kubelet_holds_the_download_pod_for_its_token_volume_and_the_operator_says_so(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    document = example("qwen2_5_vl")
    document["spec"]["model"]["source"]["huggingface"]["tokenSecretRef"] = {
        "name": "huggingface",
        "key": "token",
    }
    name = document["metadata"]["name"]
    resources.apply(document)
    ready = _reason(resources, name, "SecretNotFound", timeout=300)
    pod = _job_pod(kube, namespace, "weights-download")
    assert _waiting(pod) == ("ContainerCreating", "")
    volume = next(v.name for v in pod.spec.volumes if v.secret is not None)
    assert kubelet.failed_mount(volume, kubelet.secret_not_found("huggingface")) in _failed_mounts(
        kube, namespace, pod
    )
    assert ready["message"].startswith(
        f"{FIELD}: Secret huggingface not found in namespace {namespace}; pod "
    )

    kube.core.create_namespaced_secret(
        namespace, {"metadata": {"name": "huggingface"}, "stringData": {"other": "x"}}
    )
    _reason(resources, name, "SecretKeyNotFound", timeout=KUBELET_RETRY)
    said = kubelet.failed_mount(volume, kubelet.volume_key_not_found("token"))
    assert said in _failed_mounts(kube, namespace, pod)

    kube.core.patch_namespaced_secret(
        "huggingface", namespace, {"stringData": {"token": "hf_not_a_real_token"}}
    )
    resources.wait_phase(name, "Ready", timeout=KUBELET_RETRY + 120)
