"""The operator's watch-fed cache never goes back to a version it has seen superseded, and knows an echo."""

from __future__ import annotations

from typing import Any

from mmd_operator.kube import cache as cached


def _deployment(version: str, digest: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "llava",
            "namespace": "ml",
            "resourceVersion": version,
            "annotations": {"serving.multimodal.dev/applied-hash": digest},
        },
        "spec": {"replicas": 1},
        "status": {},
    }


def test_a_late_event_of_an_older_version_does_not_replace_a_newer_one() -> None:
    store = cached.Cache()
    store.put(cached.DEPLOYMENTS, _deployment("120", "new"))  # what the operator's own apply returned
    store.put(cached.DEPLOYMENTS, _deployment("97", "old"))  # the watch catching up, or replaying
    assert store.get(cached.DEPLOYMENTS, "ml", "llava").meta.resource_version == "120"
    store.put(cached.DEPLOYMENTS, _deployment("121", "newer"))
    assert store.get(cached.DEPLOYMENTS, "ml", "llava").meta.resource_version == "121"


def test_after_a_deletion_any_version_is_taken() -> None:
    store = cached.Cache()
    store.put(cached.DEPLOYMENTS, _deployment("120", "a"))
    store.drop(cached.DEPLOYMENTS, "ml", "llava")
    store.put(cached.DEPLOYMENTS, _deployment("5", "b"))
    assert store.get(cached.DEPLOYMENTS, "ml", "llava").meta.resource_version == "5"


def test_only_a_new_version_or_a_new_reading_of_one_is_news() -> None:
    store = cached.Cache()
    assert store.put(cached.DEPLOYMENTS, _deployment("120", "a")) is True
    # The watch echo of the operator's own write: no reconcile needed.
    assert store.put(cached.DEPLOYMENTS, _deployment("120", "a")) is False
    assert store.put(cached.DEPLOYMENTS, _deployment("97", "old")) is False
    # The same version read through another schema (a CRD just changed): the later reading wins.
    assert store.put(cached.DEPLOYMENTS, _deployment("120", "b")) is True
    assert (
        store.get(cached.DEPLOYMENTS, "ml", "llava").meta.annotation("serving.multimodal.dev/applied-hash")
        == "b"
    )
    assert store.put(cached.DEPLOYMENTS, _deployment("121", "b")) is True


def test_a_resource_is_held_compactly_and_read_back_whole_and_relabelling_it_leaves_no_stale_index() -> None:
    store = cached.Cache()
    resource = {
        "apiVersion": "serving.multimodal.dev/v1alpha1",
        "kind": "MultimodalDeployment",
        "metadata": {
            "name": "llava",
            "namespace": "ml",
            "resourceVersion": "7",
            "labels": {"app.kubernetes.io/instance": "argo-app"},  # as Argo CD labels what it tracks
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {"model": {"type": "llava"}},
    }
    store.put(cached.RESOURCES, resource)
    read = store.get(cached.RESOURCES, "ml", "llava")
    assert read["spec"] == resource["spec"] and "managedFields" not in read["metadata"]
    assert [r["metadata"]["name"] for r in store.of_instance(cached.RESOURCES, "ml", "argo-app")] == ["llava"]
    relabelled = {**resource, "metadata": {**resource["metadata"], "resourceVersion": "8", "labels": {}}}
    store.put(cached.RESOURCES, relabelled)
    assert store.of_instance(cached.RESOURCES, "ml", "argo-app") == []


def _job(version: str, owners: list[str], namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "build-k1",
            "namespace": namespace,
            "resourceVersion": version,
            "ownerReferences": [
                {"apiVersion": "serving.multimodal.dev/v1alpha1", "kind": "MultimodalDeployment",
                 "name": uid, "uid": uid}
                for uid in owners
            ],
        },
        "spec": {},
        "status": {},
    }  # fmt: skip


def test_what_each_resource_owns_follows_the_owner_lists_of_the_latest_versions() -> None:
    store = cached.Cache()
    store.put(cached.JOBS, _job("1", ["a", "b"]))
    store.put(cached.JOBS, _job("1", ["a"], namespace="other"))
    assert [job.meta.name for job in store.owned_by(cached.JOBS, "ml", "a")] == ["build-k1"]
    assert len(store.owned_by(cached.JOBS, "ml", "b")) == 1
    store.put(cached.JOBS, _job("2", ["a", "c"]))  # b left the shared build, c joined it
    assert store.owned_by(cached.JOBS, "ml", "b") == []
    assert [job.meta.resource_version for job in store.owned_by(cached.JOBS, "ml", "c")] == ["2"]
    store.drop(cached.JOBS, "ml", "build-k1")
    assert store.owned_by(cached.JOBS, "ml", "a") == [] and store.owned_by(cached.JOBS, "ml", "c") == []
    assert len(store.owned_by(cached.JOBS, "other", "a")) == 1


def test_an_echo_that_overtakes_its_write_is_held_and_dropped_and_anything_else_is_handed_back() -> None:
    store = cached.Cache()
    store.put(cached.DEPLOYMENTS, _deployment("100", "a"))
    assert store.hold(cached.DEPLOYMENTS, "MODIFIED", _deployment("101", "b")) is False  # no write: news
    with store.writing(cached.DEPLOYMENTS, "ml", "llava") as outcome:
        # While the apply is on the wire: a change by someone else, then the echo of the apply itself.
        assert store.hold(cached.DEPLOYMENTS, "MODIFIED", _deployment("102", "scaled")) is True
        assert store.hold(cached.DEPLOYMENTS, "MODIFIED", _deployment("103", "applied")) is True
        store.put(cached.DEPLOYMENTS, _deployment("103", "applied"))  # the apply's answer
        outcome.version = "103"
    assert [event.version for event in outcome.others] == ["102"]  # the echo is gone, the change is not
    assert store.hold(cached.DEPLOYMENTS, "MODIFIED", _deployment("104", "c")) is False  # write over


def test_a_failed_write_hands_back_every_event_held_while_it_was_on_the_wire() -> None:
    store = cached.Cache()
    outcome = cached.WriteOutcome()
    try:
        with store.writing(cached.DEPLOYMENTS, "ml", "llava") as outcome:
            store.hold(cached.DEPLOYMENTS, "MODIFIED", _deployment("7", "x"))
            raise ConnectionError("the API server went away")
    except ConnectionError:
        pass
    assert [event.version for event in outcome.others] == ["7"]
