"""The Hugging Face token is referenced, never copied; the namespaces enforce restricted Pod Security.

A full run of a resource whose model is gated: refused while the Secret or its key is missing, then
built, served, changed and deleted. Afterwards the token's value, plain or base64-encoded, is in no
ConfigMap, resource (status included), Event, Job, pod, Deployment, Service or claim of the namespace,
in none of their labels or annotations, and not in the operator's log; the build Job reads it through
a `secretKeyRef`, and the user's Secret is left as it was.
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from tests.support.kube import Kube, Resources

from .conftest import OperatorProcess

pytestmark = pytest.mark.cluster
MLLAMA = Path(__file__).resolve().parents[2] / "examples" / "mllama.yaml"


def _everything(kube: Kube, namespace: str) -> dict[str, list[Any]]:
    """Every object of the namespace the operator or its children could have written, as plain data."""
    batch = k8s.BatchV1Api(kube.core.api_client)
    custom = k8s.CustomObjectsApi(kube.core.api_client)
    plain = kube.core.api_client.sanitize_for_serialization
    listing: dict[str, Any] = custom.list_namespaced_custom_object(
        "serving.multimodal.dev", "v1alpha1", namespace, "multimodaldeployments"
    )
    return {
        "configmaps": plain(kube.core.list_namespaced_config_map(namespace).items),
        "events": plain(kube.core.list_namespaced_event(namespace).items),
        "jobs": plain(batch.list_namespaced_job(namespace).items),
        "pods": plain(kube.core.list_namespaced_pod(namespace).items),
        "deployments": plain(kube.apps.list_namespaced_deployment(namespace).items),
        "services": plain(kube.core.list_namespaced_service(namespace).items),
        "claims": plain(kube.core.list_namespaced_persistent_volume_claim(namespace).items),
        "resources": listing["items"],
    }


def _leaks(objects: dict[str, list[Any]], secrets: tuple[str, ...]) -> list[str]:
    return [
        f"{kind}/{item['metadata']['name']}"
        for kind, items in objects.items()
        for item in items
        if any(secret in json.dumps(item) for secret in secrets)
    ]


def test_the_token_is_referenced_and_never_copied(
    kube: Kube, resources: Resources, namespace: str, operator: OperatorProcess
) -> None:
    token = f"hf_{uuid.uuid4().hex}"  # unique to this test: any hit is a copy
    secrets = (token, base64.b64encode(token.encode()).decode())
    document = yaml.safe_load(MLLAMA.read_text())
    resources.apply(document)
    kube.wait_for(
        "SecretNotFound", lambda: resources.condition("mllama", "Ready").get("reason") == "SecretNotFound"
    )
    kube.core.create_namespaced_secret(
        namespace, {"metadata": {"name": "huggingface"}, "stringData": {"other": token}}
    )
    kube.wait_for(
        "SecretKeyNotFound",
        lambda: resources.condition("mllama", "Ready").get("reason") == "SecretKeyNotFound",
    )
    kube.core.patch_namespaced_secret("huggingface", namespace, {"stringData": {"token": token}})
    resources.wait_phase("mllama", "Ready")
    document["spec"]["serving"] = {**document["spec"].get("serving", {}), "kvCacheFreeGpuMemFraction": 0.8}
    resources.apply(document)
    resources.wait_phase("mllama", "Ready")
    kube.wait_for(  # events are posted from a thread of their own
        "the Ready event",
        lambda: any(
            e.reason == "Ready"
            for e in kube.core.list_namespaced_event(namespace).items
            if e.involved_object.name == "mllama"
        ),
    )

    objects = _everything(kube, namespace)
    assert objects["jobs"] and objects["configmaps"] and objects["events"] and objects["deployments"]
    assert _leaks(objects, secrets) == []
    (job,) = objects["jobs"]
    (variable,) = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert variable == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "huggingface", "key": "token"}},
    }

    resources.delete("mllama")
    kube.wait_for("the resource to go", lambda: not _everything(kube, namespace)["resources"])
    secret = kube.core.read_namespaced_secret("huggingface", namespace)
    assert secret.data == {"other": secrets[1], "token": secrets[1]}  # the user's, untouched
    # The scan finds the value where it is: in the Secret, and nowhere else.
    assert _leaks({"secrets": [kube.core.api_client.sanitize_for_serialization(secret)]}, secrets) == [
        "secrets/huggingface"
    ]
    assert secret.metadata.owner_references is None
    log = operator.output()
    assert "mllama" in log and not any(value in log for value in secrets)


def test_the_namespaces_enforce_pod_security_and_the_operators_pods_pass_it(
    kube: Kube, resources: Resources, namespace: str, operator: OperatorProcess
) -> None:
    labels = kube.core.read_namespace(namespace).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    # A pod that merely runs as the image's user (root, for the NGC images) is refused.
    plain = {"metadata": {"name": "plain"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    with pytest.raises(k8s.ApiException) as refused:
        kube.core.create_namespaced_pod(namespace, plain)
    assert refused.value.status == 403
    message = json.loads(refused.value.body)["message"]
    assert 'violates PodSecurity "restricted:latest"' in message
    assert "runAsNonRoot" in message and "allowPrivilegeEscalation" in message
    # The controllers create the build and serving pods; a refused pod would leave them at zero.
    document = yaml.safe_load(MLLAMA.read_text())
    kube.core.create_namespaced_secret(
        namespace, {"metadata": {"name": "huggingface"}, "stringData": {"token": "hf_not_a_real_token"}}
    )
    resources.apply(document)
    resources.wait_phase("mllama", "Ready")
    batch = k8s.BatchV1Api(kube.core.api_client)
    # The operator may see the build pod's result before the Job controller counts it.
    kube.wait_for(
        "the build Job to count its pod",  # the pod was admitted and ran
        lambda: [job.status.succeeded for job in batch.list_namespaced_job(namespace).items] == [1],
    )
    serving = kube.apps.read_namespaced_deployment("mllama", namespace)
    assert serving.status.ready_replicas == 1
    for pod in kube.core.list_namespaced_pod(namespace).items:
        assert (pod.spec.security_context.run_as_user, pod.spec.security_context.fs_group) == (1000, 1000)
