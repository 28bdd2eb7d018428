"""The Hugging Face token is referenced, never copied nor read by the operator; a missing one is reported
from the kubelet's words; the namespaces enforce restricted Pod Security.

A full run of a resource whose model is gated: built, served, changed and deleted. Afterwards the token's
value, plain or base64-encoded, is in no ConfigMap, resource (status included), Event, Job, pod,
Deployment, Service or claim of the namespace, in none of their labels or annotations, and not in the
operator's log; the build Job reads it through a `secretKeyRef`, the user's Secret is left as it was, and
the API server's audit log shows no request of the operator for any Secret.

The operator reads no Secret: a missing token Secret or key is what the kubelet says of the Job's pod (a
build pod's container waits in CreateContainerConfigError; a download pod's secret volume is refused in a
FailedMount Event). kwok's nodes check no Secret, so here the test writes what the kubelet would, word for
word (`tests.support.kubelet`), on a pod kwok leaves alone (a fault label), and lets kwok start the pod
once the Secret exists, as the kubelet would by itself; `tests/pods/test_token_secret.py` has a real
kubelet say it.
"""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from mmd_testbed.localcluster.audit import requests
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.stages import FAULT_LABEL
from tests.support import kubelet
from tests.support.kube import Kube, Resources

from .conftest import OperatorProcess

pytestmark = pytest.mark.cluster
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MLLAMA = EXAMPLES / "mllama.yaml"
QWEN = EXAMPLES / "qwen2_5_vl.yaml"
# No stage of kwok's takes a pod with a fault label it has no stage for: the test writes its status.
HELD = "held-by-test"
FIELD = "spec.model.source.huggingface.tokenSecretRef"


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


def test_the_token_is_referenced_and_never_copied_nor_read(
    kube: Kube, resources: Resources, namespace: str, operator: OperatorProcess, local_cluster: LocalCluster
) -> None:
    started = datetime.now(UTC)
    token = f"hf_{uuid.uuid4().hex}"  # unique to this test: any hit is a copy
    secrets = (token, base64.b64encode(token.encode()).decode())
    kube.core.create_namespaced_secret(
        namespace, {"metadata": {"name": "huggingface"}, "stringData": {"other": token, "token": token}}
    )
    document = yaml.safe_load(MLLAMA.read_text())
    resources.apply(document)
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
    assert "mmd-operator" in log and not any(value in log for value in secrets)
    asked = requests(local_cluster.audit_log, user_agent_prefixes=("mmd-operator/",), since=started)
    assert asked, "the audit log holds the operator's requests"
    assert [e for e in asked if e["objectRef"].get("resource") == "secrets"] == []


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


def _held_job_pod(kube: Kube, namespace: str, component: str) -> dict[str, Any]:
    """The Job's pod once the scheduler has placed it (kwok leaves it alone), as plain data."""
    selector = f"app.kubernetes.io/component={component}"

    def placed() -> Any:
        pods = kube.core.list_namespaced_pod(namespace, label_selector=selector).items
        return pods[0] if pods and pods[0].spec.node_name else None

    pod = kube.wait_for(f"the {component} pod to be scheduled", placed)
    found: dict[str, Any] = kube.core.api_client.sanitize_for_serialization(pod)
    return found


def _release(kube: Kube, namespace: str, pod: dict[str, Any]) -> None:
    """The Secret is there now: the kubelet starts the pod by itself; kwok's stages play that part."""
    kube.core.create_namespaced_secret(
        namespace, {"metadata": {"name": "huggingface"}, "stringData": {"token": "hf_not_a_real_token"}}
    )
    name = pod["metadata"]["name"]
    kube.core.patch_namespaced_pod(name, namespace, {"metadata": {"labels": {FAULT_LABEL: None}}})


def _ready_condition(resources: Resources, name: str, reason: str) -> dict[str, Any]:
    resources.kube.wait_for(
        f"{name} to be {reason}", lambda: resources.condition(name, "Ready").get("reason") == reason
    )
    return resources.condition(name, "Ready")


def test_a_missing_token_secret_or_key_is_what_the_kubelet_says_of_the_build_pod(
    kube: Kube, resources: Resources, namespace: str, operator: OperatorProcess
) -> None:
    document = yaml.safe_load(MLLAMA.read_text())
    document["spec"]["build"] = {"pod": {"labels": {FAULT_LABEL: HELD}}}
    resources.apply(document)
    pod = _held_job_pod(kube, namespace, "engine-build")
    name, container = pod["metadata"]["name"], pod["spec"]["containers"][0]["name"]

    def kubelet_says(message: str) -> None:
        status = kubelet.config_error_status([container], message, node_ip=None)
        kube.core.patch_namespaced_pod_status(name, namespace, {"status": status})

    kubelet_says(kubelet.secret_not_found("huggingface"))
    ready = _ready_condition(resources, "mllama", "SecretNotFound")
    assert ready["message"] == (
        f"{FIELD}: Secret huggingface not found in namespace {namespace}; "
        f"pod {name} waits for it (the kubelet starts it once it is there): create it with kubectl create "
        f"secret generic huggingface -n {namespace} --from-literal=token=<your Hugging Face token>."
    )
    assert resources.get("mllama")["status"]["phase"] == "Failed"
    # The Job waits with its pod; nothing serves yet.
    assert [j.metadata.name for j in kube.batch.list_namespaced_job(namespace).items] == [
        pod["metadata"]["labels"]["batch.kubernetes.io/job-name"]
    ]
    assert kube.apps.list_namespaced_deployment(namespace).items == []
    kubelet_says(kubelet.env_key_not_found("token", namespace, "huggingface"))
    ready = _ready_condition(resources, "mllama", "SecretKeyNotFound")
    assert ready["message"].startswith(f"{FIELD}: Secret huggingface has no key token; pod ")
    _release(kube, namespace, pod)
    resources.wait_phase("mllama", "Ready")
    job = kube.batch.list_namespaced_job(namespace).items[0]
    env = job.spec.template.spec.containers[0].env
    assert [(e.name, e.value_from.secret_key_ref.name, e.value_from.secret_key_ref.key) for e in env] == [
        ("HF_TOKEN", "huggingface", "token")
    ]
    # What an admin tailing the log sees: one WARNING per failure reason, one INFO when it recovered.
    lines = [line for line in operator.log.read_text().splitlines() if f"{namespace}/mllama " in line]
    warnings = [line for line in lines if " WARNING " in line]
    assert [line.split(": ")[2] for line in warnings] == ["SecretNotFound", "SecretKeyNotFound"], lines
    assert f"{namespace}/mllama is Failed: SecretNotFound: {FIELD}: Secret huggingface" in warnings[0]
    assert [line for line in lines if " INFO " in line and "recovered" in line], lines


def test_a_missing_token_secret_or_key_is_what_the_kubelet_says_of_the_download_pods_volume(
    kube: Kube, resources: Resources, namespace: str, operator: OperatorProcess
) -> None:
    document = yaml.safe_load(QWEN.read_text())
    hub = document["spec"]["model"]["source"]["huggingface"]
    hub["tokenSecretRef"] = {"name": "huggingface", "key": "token"}
    document["spec"]["build"] = {"pod": {"labels": {FAULT_LABEL: HELD}}}
    name = document["metadata"]["name"]
    resources.apply(document)
    pod = _held_job_pod(kube, namespace, "weights-download")
    container = pod["spec"]["containers"][0]["name"]
    volume = next(v["name"] for v in pod["spec"]["volumes"] if v.get("secret"))
    status = kubelet.creating_status([container], node_ip=None)
    kube.core.patch_namespaced_pod_status(pod["metadata"]["name"], namespace, {"status": status})
    missing = kubelet.failed_mount(volume, kubelet.secret_not_found("huggingface"))
    kube.core.create_namespaced_event(namespace, kubelet.failed_mount_event(pod, missing))
    ready = _ready_condition(resources, name, "SecretNotFound")
    assert ready["message"].startswith(f"{FIELD}: Secret huggingface not found in namespace {namespace}; ")
    # The kubelet's last word holds: the Secret came without the key.
    no_key = kubelet.failed_mount(volume, kubelet.volume_key_not_found("token"))
    later = kubelet.failed_mount_event(pod, no_key, at="2026-01-01T00:01:00Z")
    kube.core.create_namespaced_event(namespace, later)
    _ready_condition(resources, name, "SecretKeyNotFound")
    _release(kube, namespace, pod)
    resources.wait_phase(name, "Ready")
