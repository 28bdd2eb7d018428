"""The operator's Events on the in-memory API server: posted in order from their own thread, never holding a
reconcile up, and a refused one lost alone."""

from __future__ import annotations

import threading

import pytest
import yaml

from mmd_operator.kube.events import EventRecorder
from mmd_operator.vocabulary import kinds
from tests.support.examples import EXAMPLES_DIR
from tests.support.in_memory_api import Request
from tests.support.in_memory_cluster import InMemoryCluster

NS = "ml"


@pytest.fixture
def cluster() -> InMemoryCluster:
    return InMemoryCluster()


def resource(cluster: InMemoryCluster) -> dict[str, object]:
    document = yaml.safe_load((EXAMPLES_DIR / "llava.yaml").read_text())
    document["metadata"] = {"name": "llava", "namespace": NS}
    return cluster.create(document)


def posted(request: Request) -> bool:
    return request.method == "POST" and request.path.endswith("/events")


def test_events_are_posted_in_the_order_recorded_naming_the_resource(cluster: InMemoryCluster) -> None:
    involved = resource(cluster)
    recorder = EventRecorder(cluster.client, "mmd-operator")
    for n in range(5):
        recorder.record(involved, type="Normal", reason=f"Step{n}", message="m" * 2000)
    recorder.close()
    events = cluster.server.all(kinds.EVENT, NS)
    assert [e["reason"] for e in sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"]))] == [
        f"Step{n}" for n in range(5)
    ]
    event = events[0]
    metadata = involved["metadata"]
    assert event["involvedObject"] == {
        "apiVersion": involved["apiVersion"],
        "kind": involved["kind"],
        "name": "llava",
        "namespace": NS,
        "uid": metadata["uid"],
        "resourceVersion": metadata["resourceVersion"],
    }
    assert len(event["message"]) == 1024 and event["source"] == {"component": "mmd-operator"}


def test_recording_an_event_never_waits_for_the_api_server(cluster: InMemoryCluster) -> None:
    involved = resource(cluster)
    answering, answered = threading.Event(), threading.Event()

    def slow(_: Request) -> None:
        answering.set()
        assert answered.wait(10), "the test did not let the post finish"

    cluster.server.before(posted, slow)
    recorder = EventRecorder(cluster.client, "mmd-operator")
    recorder.record(involved, type="Normal", reason="Slow", message="the API server is slow")
    recorder.record(involved, type="Normal", reason="Next", message="queued behind it")
    assert answering.wait(10)
    assert cluster.server.all(kinds.EVENT, NS) == [], "both recorded while the first post still waits"
    answered.set()
    recorder.close()
    assert sorted(e["reason"] for e in cluster.server.all(kinds.EVENT, NS)) == ["Next", "Slow"]


def test_a_refused_event_is_lost_alone(cluster: InMemoryCluster, caplog: pytest.LogCaptureFixture) -> None:
    involved = resource(cluster)
    cluster.server.refuse(posted, 403, "Forbidden", "events is forbidden")
    recorder = EventRecorder(cluster.client, "mmd-operator")
    recorder.record(involved, type="Warning", reason="Refused", message="never stored")
    recorder.record(involved, type="Normal", reason="Stored", message="after the refusal")
    recorder.close()
    assert [e["reason"] for e in cluster.server.all(kinds.EVENT, NS)] == ["Stored"]
    assert "Could not post event Refused" in caplog.text
