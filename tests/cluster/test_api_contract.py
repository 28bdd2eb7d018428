"""The real API server keeps the contract the unit tier's in-memory one is held to.

Every case of `tests.support.api_contract` runs here against the local control plane's kube-apiserver and
controller manager (its garbage collector), in a namespace of its own, through the operator's own client;
`tests/unit/kube/test_in_memory_api.py` runs the same cases on the in-memory server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from mmd_operator.kube.client import KubeClient
from mmd_testbed.localcluster.cluster import LocalCluster
from tests.support.api_contract import CASES, Subject

# The session's operator, had an earlier module on this worker started it, would write statuses here.
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("no_operator")]


def _eventually(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.3)
    pytest.fail(f"the API server did not within {timeout:.0f} s: {what}")


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_the_real_api_server_keeps_the_contract(
    case: Callable[[Subject], None],
    local_cluster: LocalCluster,
    api_client: k8s.ApiClient,
    namespace: str,
    crd: None,
) -> None:
    clients: list[KubeClient] = []

    def client(field_manager: str) -> KubeClient:
        made = KubeClient.from_kubeconfig(str(local_cluster.kubeconfig), field_manager=field_manager)
        clients.append(made)
        return made

    def watch_configmaps(since: str, count: int) -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []
        stream = watch.Watch()
        core = k8s.CoreV1Api(api_client)
        for event in stream.stream(
            core.list_namespaced_config_map, namespace, resource_version=since, timeout_seconds=20
        ):
            seen.append((event["type"], event["raw_object"]["metadata"]["name"]))
            if len(seen) >= count:
                stream.stop()
        return seen

    try:
        case(
            Subject(
                namespace=namespace, client=client, eventually=_eventually, watch_configmaps=watch_configmaps
            )
        )
    finally:
        for made in clients:
            made.close()
