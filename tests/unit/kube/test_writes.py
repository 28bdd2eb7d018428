"""The writer on the in-memory API server: what it sends, and what it leaves unsent.

No apply when the cache holds the manifest's digest; shared children joined with one append each and left
with a precondition that a concurrent join turns into a 409, read again and redone; the last user out
passes the child to the heir it is given, or deletes it by its uid when there is none; a Job of another
user's recipe joined instead of replaced; `replicas` handed over to the autoscaler's side before the
apply that leaves them out, and taken back; the status through its subresource; the engine index made
once and added to.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from engine_builder.result_format import BuildSucceeded
from mmd_operator.api.v1alpha1 import API_VERSION, KIND
from mmd_operator.desired import scaling
from mmd_operator.facts import OwnerRef
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import ApiError
from mmd_operator.kube.engine_index import EngineIndex
from mmd_operator.kube.writes import WriteCount, Writer
from mmd_operator.vocabulary import hashing, kinds, labels, ownership
from mmd_operator.vocabulary.ownership import ObjectKey
from tests.support.builds import summary
from tests.support.examples import EXAMPLES_DIR
from tests.support.in_memory_api import Request
from tests.support.in_memory_cluster import InMemoryCluster

NS = "ml"
JOB = ObjectKey.of(kinds.JOB, "build-shared")


@pytest.fixture
def cluster() -> InMemoryCluster:
    return InMemoryCluster()


@pytest.fixture
def writer(cluster: InMemoryCluster) -> Writer:
    return Writer(cluster.client, cluster.store)


def user(cluster: InMemoryCluster, name: str) -> OwnerRef:
    """A MultimodalDeployment that exists (an owner the garbage collector finds)."""
    document = yaml.safe_load((EXAMPLES_DIR / "llava.yaml").read_text())
    document["metadata"] = {"name": name, "namespace": NS}
    return OwnerRef(name=name, uid=cluster.create(document)["metadata"]["uid"])


def configmap(data: dict[str, str], *, owner: OwnerRef) -> dict[str, Any]:
    return hashing.stamped(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "llava-repository",
                "namespace": NS,
                "labels": labels.common(labels.MODEL_REPOSITORY),
                "ownerReferences": [ownership.owner_reference(owner, controller=True)],
            },
            "data": data,
        }
    )


def job(*owners: OwnerRef, args: tuple[str, ...] = ("build",)) -> dict[str, Any]:
    return hashing.stamped(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": JOB.name,
                "namespace": NS,
                "labels": labels.common(labels.ENGINE_BUILD),
                "ownerReferences": [ownership.owner_reference(o, controller=False) for o in owners],
            },
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "build", "image": "b", "args": list(args)}],
                    }
                }
            },
        }
    )


def owners_of(cluster: InMemoryCluster, kind: kinds.ApiKind, name: str) -> list[str]:
    live = cluster.server.get(kind, NS, name)
    assert live is not None
    return [reference["name"] for reference in live["metadata"].get("ownerReferences") or []]


def patches_of(cluster: InMemoryCluster, content_type: str) -> list[Request]:
    return [r for r in cluster.server.writes() if r.method == "PATCH" and r.content_type == content_type]


# -- applies -----------------------------------------------------------------------------------------


def test_nothing_is_sent_for_a_manifest_whose_digest_the_cache_holds(
    cluster: InMemoryCluster, writer: Writer
) -> None:
    owner = user(cluster, "llava")
    before = len(cluster.server.writes())
    count = WriteCount()
    writer.apply(configmap({"a": "1"}, owner=owner), count)
    writer.apply(configmap({"a": "1"}, owner=owner), count)
    assert len(cluster.server.writes()) == before + 1 and count.applied == ["ConfigMap/llava-repository"]
    # The cache holds the answer (and so the digest) at once, with no watch event fed.
    held = cluster.store.get(cached.CONFIGMAPS, NS, "llava-repository")
    assert held.annotation(labels.APPLIED_HASH) == hashing.applied_hash(configmap({"a": "1"}, owner=owner))
    writer.apply(configmap({"a": "2"}, owner=owner), count)
    assert len(cluster.server.writes()) == before + 2
    live = cluster.server.get(kinds.CONFIGMAP, NS, "llava-repository")
    assert live is not None and live["data"] == {"a": "2"}


def test_a_job_of_another_users_recipe_is_joined_not_replaced(
    cluster: InMemoryCluster, writer: Writer
) -> None:
    first, second = user(cluster, "first"), user(cluster, "second")
    writer.apply(job(first), WriteCount())
    count = WriteCount()
    writer.apply(job(second, args=("build", "--other-pod-settings")), count)  # the API server answers 422
    assert count.total == 0
    assert cluster.store.get(cached.JOBS, NS, JOB.name).meta.owners == (first,)
    live = cluster.server.get(kinds.JOB, NS, JOB.name)
    assert live is not None and live["spec"]["template"]["spec"]["containers"][0]["args"] == ["build"]


# -- shared children's owners ------------------------------------------------------------------------


def test_each_user_joins_a_shared_job_with_one_append(cluster: InMemoryCluster, writer: Writer) -> None:
    first, second, third = user(cluster, "first"), user(cluster, "second"), user(cluster, "third")
    writer.apply(job(first), WriteCount())
    count = WriteCount()
    writer.join(NS, JOB, second, count)
    writer.join(NS, JOB, third, count)
    assert owners_of(cluster, kinds.JOB, JOB.name) == ["first", "second", "third"]
    assert (
        len(patches_of(cluster, "application/json-patch+json")) == 2
        and count.owners == [f"Job/{JOB.name}"] * 2
    )
    assert cluster.store.get(cached.JOBS, NS, JOB.name).meta.owners == (first, second, third)


def test_a_child_without_owner_references_is_joined_by_a_read_and_a_patch(
    cluster: InMemoryCluster, writer: Writer
) -> None:
    owner = user(cluster, "llava")
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "models", "namespace": NS},
    }
    cluster.create({**claim, "spec": {"accessModes": ["ReadWriteMany"]}})
    writer.join(NS, ObjectKey.of(kinds.CLAIM, "models"), owner, WriteCount())  # the append is refused: 422
    assert owners_of(cluster, kinds.CLAIM, "models") == ["llava"]
    assert len(patches_of(cluster, "application/merge-patch+json")) == 1


def test_a_leave_that_meets_a_concurrent_join_reads_again_and_keeps_it(
    cluster: InMemoryCluster, writer: Writer
) -> None:
    first, second, third = user(cluster, "first"), user(cluster, "second"), user(cluster, "third")
    writer.apply(job(first, second), WriteCount())
    other = Writer(cluster.server.client(), cached.Cache())  # another reconcile's, on another worker

    def third_joins(_: Request) -> None:
        other.join(NS, JOB, third, WriteCount())

    cluster.server.before(lambda r: r.content_type == "application/merge-patch+json", third_joins)
    count = WriteCount()
    writer.leave(NS, JOB, first, count)
    assert owners_of(cluster, kinds.JOB, JOB.name) == ["second", "third"]
    assert len(patches_of(cluster, "application/merge-patch+json")) == 2, "the first patch met a 409"
    assert count.owners == [f"Job/{JOB.name}"]


def test_owners_that_keep_changing_fail_the_leave_after_three_reads(
    cluster: InMemoryCluster, writer: Writer
) -> None:
    first, second = user(cluster, "first"), user(cluster, "second")
    writer.apply(job(first, second), WriteCount())
    relabel = cluster.server.client("someone")
    turn = iter(range(10))

    def someone_changes_it(_: Request) -> None:
        patch = {"metadata": {"labels": {"touched": str(next(turn))}}}
        relabel.merge_patch("batch/v1", "Job", NS, JOB.name, patch)

    def the_writers_patch(request: Request) -> bool:
        return (
            request.content_type == "application/merge-patch+json"
            and request.query["fieldManager"] == "mmd-operator"
        )

    cluster.server.before(the_writers_patch, someone_changes_it, times=3)
    with pytest.raises(ApiError) as refused:
        writer.leave(NS, JOB, first, WriteCount())
    assert refused.value.conflict and "kept changing" in refused.value.message
    assert owners_of(cluster, kinds.JOB, JOB.name) == ["first", "second"]


def test_the_last_user_out_deletes_the_shared_child_by_its_uid(
    cluster: InMemoryCluster, writer: Writer
) -> None:
    only = user(cluster, "only")
    writer.apply(job(only), WriteCount())
    uid = cluster.store.get(cached.JOBS, NS, JOB.name).meta.uid
    count = WriteCount()
    writer.leave(NS, JOB, only, count)
    assert cluster.server.get(kinds.JOB, NS, JOB.name) is None and count.deleted == [f"Job/{JOB.name}"]
    (delete,) = [r for r in cluster.server.writes() if r.method == "DELETE"]
    assert delete.body["preconditions"] == {"uid": uid}
    assert cluster.store.get(cached.JOBS, NS, JOB.name) is None


def test_the_last_user_out_passes_the_shared_child_to_its_heir_instead_of_deleting_it(
    cluster: InMemoryCluster, writer: Writer
) -> None:
    leaving, waiting = user(cluster, "leaving"), user(cluster, "waiting")
    writer.apply(job(leaving), WriteCount())
    uid = cluster.store.get(cached.JOBS, NS, JOB.name).meta.uid
    asked: list[tuple[ObjectKey, str]] = []

    def heir(key: ObjectKey, live: dict[str, Any]) -> OwnerRef:
        asked.append((key, live["metadata"]["uid"]))
        return waiting

    count = WriteCount()
    writer.leave(NS, JOB, leaving, count, heir=heir)
    assert asked == [(JOB, uid)], "the heir is asked once, about the child as read"
    assert owners_of(cluster, kinds.JOB, JOB.name) == ["waiting"]
    assert cluster.server.get(kinds.JOB, NS, JOB.name)["metadata"]["uid"] == uid, (
        "the same Job, not a new one"
    )
    assert count.owners == [f"Job/{JOB.name}"] and count.deleted == []
    assert not [r for r in cluster.server.writes() if r.method == "DELETE"]


def test_a_user_who_is_not_the_last_out_asks_for_no_heir(cluster: InMemoryCluster, writer: Writer) -> None:
    first, second = user(cluster, "first"), user(cluster, "second")
    writer.apply(job(first, second), WriteCount())

    def heir(key: ObjectKey, live: dict[str, Any]) -> OwnerRef:
        raise AssertionError("another user is still there")

    writer.leave(NS, JOB, first, WriteCount(), heir=heir)
    assert owners_of(cluster, kinds.JOB, JOB.name) == ["second"]


# -- replicas, status, engine index ------------------------------------------------------------------


def deployment(owner: OwnerRef, replicas: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "llava"}},
        "template": {"metadata": {"labels": {"app": "llava"}}},
    }
    if replicas is not None:
        spec["replicas"] = replicas
    metadata = {
        "name": "llava",
        "namespace": NS,
        "labels": labels.common(labels.SERVING),
        "ownerReferences": [ownership.owner_reference(owner, controller=True)],
    }
    return hashing.stamped(
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": spec}
    )


def test_replicas_are_handed_over_before_the_apply_that_leaves_them_out_and_taken_back(
    cluster: InMemoryCluster, writer: Writer
) -> None:
    owner = user(cluster, "llava")
    manager = scaling.handover_manager("mmd-operator")
    writer.apply(deployment(owner, replicas=3), WriteCount())
    count = WriteCount()
    writer.carry_out(
        NS,
        owner,
        count,
        apply=[deployment(owner, replicas=None)],
        join=(),
        leave=(),
        delete=(),
        handover=scaling.replicas_handover(kinds.DEPLOYMENT, "llava", NS, 3),
        handover_manager=manager,
    )
    held = cluster.store.get(cached.DEPLOYMENTS, NS, "llava")
    assert held.replicas == 3 and held.replicas_managers == ((manager, "Apply"),)
    assert count.applied == ["Deployment/llava replicas handover", "Deployment/llava"]
    cluster.server.client("horizontal-pod-autoscaler").merge_patch(
        "apps/v1", "Deployment", NS, "llava", {"spec": {"replicas": 5}}
    )
    cluster.feed()
    assert cluster.store.get(cached.DEPLOYMENTS, NS, "llava").replicas == 5
    writer.apply(deployment(owner, replicas=2), WriteCount())  # the autoscaling section removed
    taken = cluster.store.get(cached.DEPLOYMENTS, NS, "llava")
    assert taken.replicas == 2 and taken.replicas_managers == (("mmd-operator", "Apply"),)


def test_the_status_goes_through_its_subresource_into_the_cache(
    cluster: InMemoryCluster, writer: Writer
) -> None:
    user(cluster, "llava")
    cluster.feed()
    body = cluster.store.get(cached.RESOURCES, NS, "llava")
    answer = writer.status(body, {"phase": "Pending", "observedGeneration": 1})
    assert answer["status"]["phase"] == "Pending"
    assert cluster.store.get(cached.RESOURCES, NS, "llava")["status"]["phase"] == "Pending"
    (status,) = [r for r in cluster.server.writes() if r.path.endswith("/status")]
    assert (
        status.content_type == "application/apply-patch+yaml"
        and status.query["fieldManager"] == "mmd-operator"
    )
    assert set(status.body) == {"apiVersion", "kind", "metadata", "status"}
    assert (status.body["apiVersion"], status.body["kind"]) == (API_VERSION, KIND)


def test_the_engine_index_is_made_once_and_each_build_adds_its_key(
    cluster: InMemoryCluster, writer: Writer
) -> None:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "mmd-engine-cache", "namespace": NS},
    }
    cluster.create({**claim, "spec": {"accessModes": ["ReadWriteOnce"]}})
    cluster.feed()
    count = WriteCount()
    first, second = summary("a" * 20), summary("b" * 20)
    writer.record_build(NS, "mmd-engine-cache", first, count)
    writer.record_build(NS, "mmd-engine-cache", second, count)
    index = cluster.store.get(cached.CONFIGMAPS, NS, "mmd-engine-cache-index")
    assert isinstance(index, EngineIndex)
    assert {key: isinstance(entry, BuildSucceeded) for key, entry in index.entries.items()} == {
        "a" * 20: True,
        "b" * 20: True,
    }
    assert [r.method for r in cluster.server.writes()[-3:]] == ["PATCH", "POST", "PATCH"]  # 404, create, add
    assert owners_of(cluster, kinds.CONFIGMAP, "mmd-engine-cache-index") == ["mmd-engine-cache"]
    assert count.applied == ["engine-index/" + "a" * 20, "engine-index/" + "b" * 20]
