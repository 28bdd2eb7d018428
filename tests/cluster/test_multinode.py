"""A replica across pods on the real control plane: refused with what to install while the cluster does not
serve the LeaderWorkerSet API, then, once its CRD is there, a LeaderWorkerSet and the group's SSH Secret,
the keys in no other object and not in the operator's log.

kwok runs no LeaderWorkerSet controller: this tier checks what the operator writes and says; the groups'
pods, their launch and their world run on real nodes (tests/pods/test_multinode.py).
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from mmd_operator.vocabulary import names
from mmd_testbed.localcluster import leaderworkerset
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.lwsbinaries import ensure_lws_binaries
from tests.support.kube import Kube, Resources

from .conftest import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llava-tp16-two-nodes.yaml"
NAME = "llava-tp16"


def _install_lws_crds(api_client: k8s.ApiClient) -> None:
    extensions = k8s.ApiextensionsV1Api(api_client)
    bodies = leaderworkerset.crds(ensure_lws_binaries(Layout.discover(), say=print))
    for body in bodies:
        try:
            extensions.create_custom_resource_definition(body)
        except k8s.ApiException as error:
            if error.status != 409:
                raise
    leaderworkerset.wait_established(api_client, [b["metadata"]["name"] for b in bodies], 60, time.sleep)


def _everything(kube: Kube, namespace: str) -> list[Any]:
    """Every object of the namespace the keys could have leaked into, as plain data."""
    plain = kube.core.api_client.sanitize_for_serialization
    custom = k8s.CustomObjectsApi(kube.core.api_client)
    objects: list[Any] = []
    for listing in (
        kube.core.list_namespaced_config_map(namespace).items,
        kube.core.list_namespaced_event(namespace).items,
        kube.core.list_namespaced_pod(namespace).items,
        kube.core.list_namespaced_service(namespace).items,
        kube.batch.list_namespaced_job(namespace).items,
    ):
        objects += plain(listing)
    objects += custom.list_namespaced_custom_object(
        "serving.multimodal.dev", "v1alpha1", namespace, "multimodaldeployments"
    )["items"]
    objects += custom.list_namespaced_custom_object(
        leaderworkerset.GROUP, leaderworkerset.VERSION, namespace, leaderworkerset.PLURAL
    )["items"]
    return objects


def test_a_replica_across_pods_waits_for_the_leaderworkerset_api_then_gets_its_group_and_keys(
    kube: Kube, resources: Resources, namespace: str, operator: OperatorProcess, api_client: k8s.ApiClient
) -> None:
    extensions = k8s.ApiextensionsV1Api(api_client)
    served = any(
        crd.spec.group == leaderworkerset.GROUP for crd in extensions.list_custom_resource_definition().items
    )
    document = yaml.safe_load(EXAMPLE.read_text())
    resources.apply(document)
    if not served:
        failed = resources.wait_phase(NAME, "Failed")
        ready = next(c for c in failed["status"]["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "LeaderWorkerSetNotInstalled"
        assert ready["message"].startswith(
            "spec.serving.gpusPerPod: a replica of 16 ranks (tensor 16) in 2 pods of 8 GPUs is a "
            "LeaderWorkerSet group, and this cluster does not serve leaderworkerset.x-k8s.io/v1: install "
            "the LeaderWorkerSet controller"
        ), ready["message"]
        # Nothing half-created.
        assert kube.batch.list_namespaced_job(namespace).items == []
        assert (
            kube.core.list_namespaced_config_map(namespace, label_selector="app.kubernetes.io/instance").items
            == []
        )
        assert kube.core.list_namespaced_persistent_volume_claim(namespace).items == []
        _install_lws_crds(api_client)
    installed = time.monotonic()
    custom = k8s.CustomObjectsApi(api_client)

    def group_set() -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = custom.get_namespaced_custom_object(
                leaderworkerset.GROUP,
                leaderworkerset.VERSION,
                namespace,
                leaderworkerset.PLURAL,
                names.group_set(NAME),
            )
        except k8s.ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    lws = kube.wait_for("the LeaderWorkerSet", group_set, timeout=180)
    print(f"\nLeaderWorkerSet created {time.monotonic() - installed:.1f} s after its CRD was installed")
    group = lws["spec"]["leaderWorkerTemplate"]
    assert lws["spec"]["replicas"] == 1 and group["size"] == 2
    assert lws["spec"]["startupPolicy"] == "LeaderCreated"
    assert group["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["metadata"]["ownerReferences"][0]["name"] == NAME
    assert kube.apps.list_namespaced_deployment(namespace).items == []
    service = kube.core.read_namespaced_service(NAME, namespace)
    assert service.spec.selector["leaderworkerset.sigs.k8s.io/worker-index"] == "0"

    secret = kube.core.read_namespaced_secret(names.ssh_secret(NAME), namespace)
    assert set(secret.data) == set(names.SSH_SECRET_FILES)
    assert [owner.name for owner in secret.metadata.owner_references] == [NAME]
    private = base64.b64decode(secret.data[names.SSH_CLIENT_KEY]).decode()
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    # The private keys, plain or as the Secret holds them, are nowhere else: not in a ConfigMap, the
    # status, an Event, a pod, a Job, the LeaderWorkerSet, nor the operator's log.
    values = [secret.data[key] for key in (names.SSH_CLIENT_KEY, names.SSH_HOST_KEY)]
    values += [base64.b64decode(value).decode().splitlines()[1] for value in values]
    dumped = [json.dumps(item) for item in _everything(kube, namespace)]
    assert not [text[:120] for text in dumped if any(value in text for value in values)]
    assert not any(value in operator.output() for value in values)

    # Applied again, nothing changes: the keys are made once.
    resources.apply(document)
    time.sleep(3)
    again = kube.core.read_namespaced_secret(names.ssh_secret(NAME), namespace)
    assert again.data == secret.data and again.metadata.resource_version == secret.metadata.resource_version
    status = resources.get(NAME)["status"]
    assert status["podsPerReplica"] == 2
