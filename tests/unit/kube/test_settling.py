"""The spec a reconcile acts on, on the in-memory API server and a clock the test turns.

A new generation is read once more `CONFIRM_SECONDS` after it arrived; a generation that reads two ways
(an old schema's pruned copy) is not acted on until two reads agree; a resource gone is None.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from mmd_operator.api.v1alpha1 import API_VERSION, KIND
from mmd_operator.kube import cache as cached
from mmd_operator.kube.settling import CONFIRM_SECONDS, UNSETTLED, SpecSettling
from tests.support.examples import EXAMPLES_DIR
from tests.support.in_memory_cluster import InMemoryCluster

NS = "ml"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cluster() -> InMemoryCluster:
    cluster = InMemoryCluster()
    document = yaml.safe_load((EXAMPLES_DIR / "llava.yaml").read_text())
    document["metadata"] = {"name": "llava", "namespace": NS}
    cluster.create(document)
    cluster.feed()
    return cluster


def reads(cluster: InMemoryCluster) -> int:
    return sum(1 for r in cluster.server.requests if r.method == "GET" and r.path.endswith("/llava"))


def respecify(cluster: InMemoryCluster, batch: int) -> dict[str, Any]:
    live = cluster.server.get(cached.RESOURCES.api, NS, "llava")
    assert live is not None
    document = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "llava", "namespace": NS}}
    return cluster.create(
        {**document, "spec": {**live["spec"], "engine": {**live["spec"]["engine"], "maxBatchSize": batch}}}
    )


def test_a_new_generation_is_read_again_once_its_confirmation_is_due(cluster: InMemoryCluster) -> None:
    clock = Clock()
    settling = SpecSettling(cluster.client, cluster.store, clock=clock)
    assert settling.body(NS, "llava")["metadata"]["generation"] == 1
    assert settling.confirm_in(NS, "llava") is None, "the first generation seen is not new"
    respecify(cluster, 4)
    cluster.feed()
    assert settling.body(NS, "llava")["metadata"]["generation"] == 2
    assert settling.confirm_in(NS, "llava") == CONFIRM_SECONDS
    settling.body(NS, "llava")
    assert reads(cluster) == 0, "not due yet: the cache answers"
    clock.now += CONFIRM_SECONDS
    respecify(cluster, 2)  # a change whose event is late: only the confirming read sees it
    assert settling.body(NS, "llava")["spec"]["engine"]["maxBatchSize"] == 2
    assert reads(cluster) == 1 and settling.confirm_in(NS, "llava") == CONFIRM_SECONDS


def test_a_generation_that_reads_two_ways_waits_until_two_reads_agree(cluster: InMemoryCluster) -> None:
    settling = SpecSettling(cluster.client, cluster.store, clock=Clock())
    whole = settling.body(NS, "llava")
    pruned = copy.deepcopy(dict(whole))
    del pruned["spec"]["engine"]["maxBatchSize"]  # the old schema's reading of the same generation
    cluster.store.put(cached.RESOURCES, pruned)
    assert settling.body(NS, "llava") is UNSETTLED
    assert settling.body(NS, "llava") is UNSETTLED, "the fresh read differs from the last: once more"
    assert reads(cluster) == 1
    assert (
        settling.body(NS, "llava")["spec"]["engine"]["maxBatchSize"]
        == whole["spec"]["engine"]["maxBatchSize"]
    )
    assert reads(cluster) == 2


def test_a_resource_deleted_before_its_read_is_gone(cluster: InMemoryCluster) -> None:
    clock = Clock()
    settling = SpecSettling(cluster.client, cluster.store, clock=clock)
    settling.body(NS, "llava")
    respecify(cluster, 4)
    cluster.feed()
    settling.body(NS, "llava")
    cluster.kubectl.delete(API_VERSION, KIND, NS, "llava")
    clock.now += CONFIRM_SECONDS
    assert settling.body(NS, "llava") is None
    settling.forget((NS, "llava"))
    assert settling.known() == set()
