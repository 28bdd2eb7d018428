"""The operator reads the kubelet's words about the token Secret where they are: a waiting container's in the
pod's status (watched, no request), a secret volume's in the pod's FailedMount Events (listed for that pod
only, while it waits in ContainerCreating)."""

from __future__ import annotations

from mmd_operator.facts import Missing
from mmd_operator.kube import object_facts
from mmd_operator.kube.observe import kubelet_refusals
from tests.support import kubelet
from tests.support.api_answerer import Server, make_client
from tests.unit.desired.test_decision import example

NAMESPACE = "ml"
ENV_NO_KEY = kubelet.pod(
    "build-abc-x7",
    NAMESPACE,
    kubelet.config_error_status(["builder"], kubelet.env_key_not_found("token", NAMESPACE, "huggingface")),
)
MOUNTING = kubelet.pod("download-abc-x7", NAMESPACE, kubelet.creating_status(["weights-download"]))
RUNNING = kubelet.pod(
    "build-abc-x7",
    NAMESPACE,
    {"phase": "Running", "containerStatuses": [{"name": "builder", "image": "b", "state": {"running": {}}}]},
)


def test_the_build_pods_config_error_is_read_from_its_status_without_a_request(server: Server) -> None:
    resource, _ = example("mllama")
    pods = (object_facts.pod(ENV_NO_KEY),)
    found, silent = kubelet_refusals(make_client(server.url), resource, NAMESPACE, pods)
    assert [m.kind for m in found] == [Missing.SECRET_KEY] and not silent
    assert server.seen == []


def test_a_pod_held_in_container_creating_has_its_failed_mount_events_read(server: Server) -> None:
    resource, _ = example("mllama")
    pods = (object_facts.pod(MOUNTING),)
    server.answers["/events"] = (200, {"kind": "EventList", "items": []})
    client = make_client(server.url)
    assert kubelet_refusals(client, resource, NAMESPACE, pods) == ([], True)  # nothing said yet: look again
    (seen,) = server.seen
    assert seen.path == (
        "/api/v1/namespaces/ml/events?fieldSelector=involvedObject.kind%3DPod%2C"
        "involvedObject.uid%3Duid-download-abc-x7%2Creason%3DFailedMount"
    )
    event = kubelet.failed_mount_event(
        MOUNTING, kubelet.failed_mount("hub-token", kubelet.secret_not_found("huggingface"))
    )
    server.answers["/events"] = (200, {"kind": "EventList", "items": [event]})
    found, silent = kubelet_refusals(client, resource, NAMESPACE, pods)
    assert [m.kind for m in found] == [Missing.SECRET] and not silent
    # Without the right to list Events, the pod waits as any other (and the operator says so once).
    server.answers["/events"] = (403, {"kind": "Status", "reason": "Forbidden", "code": 403})
    assert kubelet_refusals(client, resource, NAMESPACE, pods) == ([], True)


def test_nothing_is_asked_without_a_token_secret_or_of_a_pod_that_runs(server: Server) -> None:
    llava, _ = example("llava")
    mllama, _ = example("mllama")
    client = make_client(server.url)
    assert kubelet_refusals(client, llava, NAMESPACE, (object_facts.pod(MOUNTING),)) == ([], False)
    assert kubelet_refusals(client, mllama, NAMESPACE, (object_facts.pod(RUNNING),)) == ([], False)
    assert server.seen == []
