"""The controller on the in-memory API server: its queue, workers and watch handlers around real reconciles.

Watch events come from the in-memory server's record of each change, delivered to the controller's
handlers as kopf's streams deliver them. A probe around the real `Reconciler.reconcile` holds a reconcile
where a test needs it held and counts how many of one resource run at once. Waits are bounded; the only
fixed one waits out the child-event window to see that nothing was queued.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import yaml

from mmd_operator.config import OperatorConfig
from mmd_operator.controller import CHILD_EVENT_WINDOW_SECONDS, Controller
from mmd_operator.kube import cache as cached
from mmd_operator.reconcile import Outcome
from tests.support.examples import EXAMPLES_DIR
from tests.support.in_memory_api import Request
from tests.support.in_memory_cluster import InMemoryCluster

NS = "ml"
Key = tuple[str, str]
WAIT = 10.0


class Probe:
    """Around the real reconcile: counts, holds a key while its gate is shut, records the most at once."""

    def __init__(self, real: Callable[[str, str], Outcome]) -> None:
        self.real = real
        self.lock = threading.Lock()
        self.started: Counter[Key] = Counter()
        self.finished: Counter[Key] = Counter()
        self.running: Counter[Key] = Counter()
        self.most: Counter[Key] = Counter()
        self.gates: dict[Key, threading.Event] = {}

    def __call__(self, namespace: str, name: str) -> Outcome:
        key = (namespace, name)
        with self.lock:
            self.started[key] += 1
            self.running[key] += 1
            self.most[key] = max(self.most[key], self.running[key])
        try:
            gate = self.gates.get(key)
            if gate is not None:
                assert gate.wait(WAIT), f"{key} was held for good"
            return self.real(namespace, name)
        finally:
            with self.lock:
                self.running[key] -= 1
                self.finished[key] += 1


async def until(what: str, condition: Callable[[], bool]) -> None:
    """Wait (bounded) for `condition`, yielding to the controller's tasks meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not condition():
        assert loop.time() < deadline, f"waited {WAIT:.0f} s for {what}"
        await asyncio.sleep(0.01)


def resource(cluster: InMemoryCluster, name: str, **labels: str) -> dict[str, Any]:
    document = yaml.safe_load((EXAMPLES_DIR / "llava.yaml").read_text())
    document["metadata"] = {"name": name, "namespace": NS, "labels": labels}
    return cluster.create(document)


def run(
    cluster: InMemoryCluster, scenario: Callable[[Controller, Probe], Awaitable[None]], workers: int
) -> None:
    """Start a controller of `workers` on `cluster`, run `scenario`, stop it."""

    async def main() -> None:
        config = OperatorConfig().with_changes(workers=workers, lost_node_seconds=0)
        controller = Controller(cluster.server.client(), config)
        probe = Probe(controller.reconciler.reconcile)
        controller.reconciler.reconcile = probe  # type: ignore[method-assign]
        cluster.fed = len(cluster.server.events)  # the controller's first listing holds what is there
        await controller.start()
        try:
            await scenario(controller, probe)
        finally:
            await controller.stop()

    asyncio.run(main())


def feed(cluster: InMemoryCluster, controller: Controller) -> int:
    """Deliver the watch events since the last feed to the controller's handlers."""

    def handler(kind: cached.CachedKind, event_type: str, body: Mapping[str, Any]) -> None:
        if kind is cached.RESOURCES:
            controller.on_resource(event_type, body)
        else:
            controller.on_child(kind, event_type, body)

    return cluster.feed(handler)


def test_events_for_a_queued_resource_queue_it_once() -> None:
    cluster = InMemoryCluster()
    resource(cluster, "held")
    resource(cluster, "waiting")

    async def scenario(controller: Controller, probe: Probe) -> None:
        held, waiting = (NS, "held"), (NS, "waiting")
        await until("both first reconciles", lambda: probe.finished[held] and probe.finished[waiting])
        probe.gates[held] = threading.Event()
        resource(cluster, "held", change="1")
        feed(cluster, controller)
        await until("the held reconcile to start", lambda: probe.running[held] == 1)
        for change in ("1", "2", "3"):  # the one worker is busy: each change finds the resource queued
            resource(cluster, "waiting", change=change)
            feed(cluster, controller)
        assert len(controller.queue) == 1
        probe.gates[held].set()
        await until("the queued reconcile", lambda: probe.finished[waiting] == 2)
        await until(
            "the queue to empty", lambda: not len(controller.queue) and not any(probe.running.values())
        )
        assert probe.started[waiting] == 2

    run(cluster, scenario, workers=1)


def test_a_resource_is_reconciled_by_one_worker_at_a_time_and_again_after_an_event_mid_reconcile() -> None:
    cluster = InMemoryCluster()
    resource(cluster, "llava")

    async def scenario(controller: Controller, probe: Probe) -> None:
        key = (NS, "llava")
        await until("the first reconcile", lambda: probe.finished[key] == 1)
        probe.gates[key] = threading.Event()
        resource(cluster, "llava", change="1")
        feed(cluster, controller)
        await until("the second reconcile to start", lambda: probe.running[key] == 1)
        for change in ("2", "3"):  # three idle workers, and the resource changes twice mid-reconcile
            resource(cluster, "llava", change=change)
            feed(cluster, controller)
        await asyncio.sleep(CHILD_EVENT_WINDOW_SECONDS)
        assert probe.started[key] == 2, "no second worker took it meanwhile"
        probe.gates[key].set()
        await until("the run after it", lambda: probe.finished[key] == 3)
        await until(
            "the echo of its writes", lambda: feed(cluster, controller) == 0 and not len(controller.queue)
        )
        assert probe.most[key] == 1 and probe.started[key] == 3
        live = cluster.server.get(cached.RESOURCES.api, *key)
        assert live is not None and live["status"]["observedGeneration"] == 1

    run(cluster, scenario, workers=4)


def test_the_echo_of_the_operators_own_writes_queues_nothing() -> None:
    cluster = InMemoryCluster()
    resource(cluster, "llava")

    async def scenario(controller: Controller, probe: Probe) -> None:
        key = (NS, "llava")
        await until("the first reconcile", lambda: probe.finished[key] == 1)
        echoes = feed(cluster, controller)  # the status, the claim, the Job, the ConfigMap, the Service
        assert echoes >= 5
        await asyncio.sleep(3 * CHILD_EVENT_WINDOW_SECONDS)
        assert probe.started[key] == 1 and not len(controller.queue)

    run(cluster, scenario, workers=2)


def test_a_failed_reconcile_comes_back_and_succeeds() -> None:
    cluster = InMemoryCluster()
    resource(cluster, "llava")

    def status_write(request: Request) -> bool:
        return request.method == "PATCH" and request.path.endswith("/llava/status")

    cluster.server.refuse(status_write, 500, "InternalError", "etcdserver: request timed out")

    async def scenario(controller: Controller, probe: Probe) -> None:
        key = (NS, "llava")
        await until("the retry after the back-off", lambda: probe.finished[key] == 2)
        live = cluster.server.get(cached.RESOURCES.api, *key)
        assert live is not None and live["status"]["phase"] == "Pending"
        assert sum(1 for r in cluster.server.requests if status_write(r)) == 2

    run(cluster, scenario, workers=1)
