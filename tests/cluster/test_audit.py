"""The API server's audit log records every write with its user agent, and ServiceAccounts' reads."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch

from mmd_testbed.localcluster.audit import requests, write_requests
from mmd_testbed.localcluster.cluster import LocalCluster
from tests.support.kube import Kube

pytestmark = pytest.mark.cluster


@pytest.fixture
def user_agent() -> str:
    return f"mmd-audit-test/{uuid.uuid4().hex[:8]}"


@pytest.fixture
def core(local_cluster: LocalCluster, user_agent: str) -> Iterator[Any]:
    with local_cluster.api_client() as api_client:
        api_client.user_agent = user_agent
        yield k8s.CoreV1Api(api_client)


def _calls(event: dict[str, Any]) -> tuple[str, str, str | None]:
    ref = event["objectRef"]
    return event["verb"], ref["resource"], ref.get("name")


def test_write_requests_are_logged_with_verb_and_object_and_reads_are_not(
    local_cluster: LocalCluster, kube: Kube, namespace: str, core: Any, user_agent: str
) -> None:
    started = datetime.now(UTC)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "settings"}, "data": {"a": "1"}})
    core.patch_namespaced_config_map("settings", namespace, {"data": {"b": "2"}})
    current = core.read_namespaced_config_map("settings", namespace)
    current.data["c"] = "3"
    core.replace_namespaced_config_map("settings", namespace, current)
    core.list_namespaced_config_map(namespace)
    for _ in watch.Watch().stream(core.list_namespaced_config_map, namespace, timeout_seconds=1):
        pass
    core.delete_namespaced_config_map("settings", namespace)
    expected = [
        ("create", "configmaps", "settings"),
        ("patch", "configmaps", "settings"),
        ("update", "configmaps", "settings"),
        ("delete", "configmaps", "settings"),
    ]

    # The API server writes the event right after the response, so the last one may lag a little.
    events = kube.wait_for(
        "the four writes in the audit log",
        lambda: (lambda found: found if len(found) >= len(expected) else None)(
            write_requests(local_cluster.audit_log, user_agent_prefixes=(user_agent,), since=started)
        ),
        timeout=15,
    )
    assert [_calls(event) for event in events] == expected
    for event in events:
        assert event["objectRef"]["namespace"] == namespace
        assert (event["level"], event["stage"]) == ("Metadata", "ResponseComplete")
        assert event["userAgent"] == user_agent
        assert event["responseStatus"]["code"] < 300
        assert "requestObject" not in event and "responseObject" not in event
    # A prefix no client sends and a later `since` select none of them. (Not the operator's prefix:
    # the session's operator keeps reconciling what earlier tests left in their deleted namespaces.)
    assert (
        write_requests(local_cluster.audit_log, user_agent_prefixes=("mmd-no-such-client/",), since=started)
        == []
    )
    assert (
        write_requests(local_cluster.audit_log, user_agent_prefixes=(user_agent,), since=datetime.now()) == []
    )


def test_reads_are_logged_for_service_accounts_only(
    local_cluster: LocalCluster, kube: Kube, namespace: str, user_agent: str
) -> None:
    # The benchmark counts an operator's reads this way: it runs on a ServiceAccount's token.
    kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    rbac = k8s.RbacAuthorizationV1Api(kube.core.api_client)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    token = kube.core.create_namespaced_service_account_token(
        "reader", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    started = datetime.now(UTC)
    with local_cluster.api_client(token=token) as api_client:
        api_client.user_agent = user_agent
        reader = k8s.CoreV1Api(api_client)
        reader.list_namespaced_config_map(namespace)
        reader.read_namespaced_config_map("kube-root-ca.crt", namespace)
        for _ in watch.Watch().stream(reader.list_namespaced_config_map, namespace, timeout_seconds=1):
            pass
    events = kube.wait_for(
        "the three reads in the audit log",
        lambda: (lambda found: found if len(found) >= 3 else None)(
            requests(local_cluster.audit_log, user_agent_prefixes=(user_agent,), since=started)
        ),
        timeout=15,
    )
    assert [_calls(event) for event in events] == [
        ("list", "configmaps", None),
        ("get", "configmaps", "kube-root-ca.crt"),
        ("watch", "configmaps", None),
    ]
    assert {event["user"]["username"] for event in events} == {f"system:serviceaccount:{namespace}:reader"}
    assert write_requests(local_cluster.audit_log, user_agent_prefixes=(user_agent,), since=started) == []


def test_heartbeats_pod_status_and_events_stay_out_of_the_log(local_cluster: LocalCluster) -> None:
    # By now kwok has renewed leases, updated node and pod status, and the controllers have made events.
    everything = write_requests(local_cluster.audit_log, user_agent_prefixes=("",))
    assert everything, "the cluster's own writes (namespaces, pods, ...) are in the log"
    assert {event["verb"] for event in everything} <= {
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    }
    refs = [event.get("objectRef", {}) for event in everything]
    logged = {(ref.get("resource"), ref.get("subresource")) for ref in refs}
    for noise in (
        ("nodes", None),
        ("nodes", "status"),
        ("pods", "status"),
        ("events", None),
    ):
        assert noise not in logged
    # Node heartbeats and the API server's own leases stay out; the operator's election is counted.
    leases = {ref.get("namespace") for ref in refs if ref.get("resource") == "leases"}
    assert not leases & {"kube-node-lease", "kube-system"}, leases


def test_a_lease_outside_the_control_planes_namespaces_is_logged(
    local_cluster: LocalCluster, kube: Kube, namespace: str, user_agent: str
) -> None:
    started = datetime.now(UTC)
    with local_cluster.api_client() as api_client:
        api_client.user_agent = user_agent
        k8s.CoordinationV1Api(api_client).create_namespaced_lease(
            namespace, {"metadata": {"name": "election"}, "spec": {"holderIdentity": "a"}}
        )
    events = kube.wait_for(
        "the lease's creation in the audit log",
        lambda: write_requests(local_cluster.audit_log, user_agent_prefixes=(user_agent,), since=started),
        timeout=15,
    )
    assert [_calls(event) for event in events] == [("create", "leases", "election")]
