"""Turns watch events into reconciles: a deduplicating work queue, a bounded pool of workers, a resync.

Every event (a resource or one of its children changed) becomes the key of the resource(s) it concerns,
unless it brings a version the cache already holds (the echo of the operator's own write) or changes
only a shared child's owners (a user joining a build Job: every other user would be queued for nothing,
hundreds of times at a thousand resources); a child's event is queued after a short window, which
gathers the burst one change brings into one reconcile. A key waits in the queue at most once, a
resource is never reconciled by two workers at once, and an event that arrives during its reconcile runs
it once more afterwards. Failed reconciles come back with exponential backoff; a reconcile can ask to be
looked at again later (a pod's startup budget, a missing Secret). A periodic resync queues every
resource; with nothing changed it writes nothing. Before the first reconcile every watched kind is
listed once into the cache, so decisions never rest on a cache that has not heard of existing children
yet. asyncio; no kopf (the handlers feed it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mmd_operator.config import OperatorConfig
from mmd_operator.facts import Meta
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import ApiError, KubeClient
from mmd_operator.kube.node_leases import NodeSilence
from mmd_operator.reconcile import Reconciler
from mmd_operator.vocabulary import labels

_log = logging.getLogger(__name__)
Key = tuple[str, str]
MAX_BACKOFF = 60.0
CRD_WAIT_SECONDS = 2.0
# How long a child's event waits before its resources are queued, so that the burst of events one change
# brings (a pod scheduled, started and ready; a Deployment's status counted up; a shared build's pod
# and Job, each queueing every user of the engine) makes one reconcile rather than one each. A change of
# the resource itself is queued at once.
CHILD_EVENT_WINDOW_SECONDS = 0.1
# What the operator lists and watches, and the label selector each is narrowed to (None: everything,
# since the engine-cache claims users name are not the operator's).
WATCHED: tuple[tuple[cached.CachedKind, str | None], ...] = (
    (cached.RESOURCES, None),
    (cached.JOBS, f"{labels.MANAGED_BY}={labels.OPERATOR}"),
    (cached.PODS, f"{labels.MANAGED_BY}={labels.OPERATOR}"),
    (cached.DEPLOYMENTS, f"{labels.MANAGED_BY}={labels.OPERATOR}"),
    (cached.SERVICES, f"{labels.MANAGED_BY}={labels.OPERATOR}"),
    (cached.CONFIGMAPS, f"{labels.MANAGED_BY}={labels.OPERATOR}"),
    (cached.CLAIMS, None),
    (cached.NETWORK_POLICIES, f"{labels.MANAGED_BY}={labels.OPERATOR}"),
    (cached.AUTOSCALERS, f"{labels.MANAGED_BY}={labels.OPERATOR}"),
    (cached.DISRUPTION_BUDGETS, f"{labels.MANAGED_BY}={labels.OPERATOR}"),
    (cached.LEADER_WORKER_SETS, f"{labels.MANAGED_BY}={labels.OPERATOR}"),
    (cached.CLAIM_TEMPLATES, f"{labels.MANAGED_BY}={labels.OPERATOR}"),
)


def _without_version_and_owners(fact: Any) -> Any:
    meta = fact if isinstance(fact, Meta) else getattr(fact, "meta", None)
    if not isinstance(meta, Meta):
        return None
    bare = dataclasses.replace(meta, resource_version="", owners=())
    return bare if fact is meta else dataclasses.replace(fact, meta=bare)


def _only_owners_changed(before: Any, after: Any) -> bool:
    """Whether two facts of one child differ in nothing but their version and owner list."""
    if before is None or after is None:
        return False
    bare = _without_version_and_owners(before)
    return bare is not None and bare == _without_version_and_owners(after)


class WorkQueue:
    """Keys to reconcile, each at most once in the queue and at most once in progress."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self._active: set[Key] = set()
        self._again: set[Key] = set()
        self._timers: dict[Key, asyncio.TimerHandle] = {}

    def add(self, key: Key) -> None:
        """Queue `key` (or, while it is being reconciled, run it once more afterwards)."""
        if key in self._active:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: Key, delay: float) -> None:
        """Queue `key` after `delay` seconds (the earliest of several such requests wins)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        timer = self._timers.get(key)
        if timer is not None and not timer.cancelled() and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: Key) -> None:
        self._timers.pop(key, None)
        self.add(key)

    async def get(self) -> Key:
        """The next key to reconcile; it is in progress until `done`."""
        key = await self._queue.get()
        self._queued.discard(key)
        self._active.add(key)
        return key

    def done(self, key: Key) -> None:
        """`key`'s reconcile ended."""
        self._active.discard(key)
        if key in self._again:
            self._again.discard(key)
            self.add(key)

    def __len__(self) -> int:
        return len(self._queued)

    def cancel_timers(self) -> None:
        """Drop every delayed add (at shutdown)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()


class Controller:
    """The cache, the reconciler and the workers of one operator process."""

    def __init__(self, client: KubeClient, config: OperatorConfig) -> None:
        self.client = client
        self.config = config
        self.store = cached.Cache()
        self.reconciler = Reconciler(client, self.store, config)
        self.queue = WorkQueue()
        self._failures: dict[Key, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._executor = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="reconcile")
        self.ready = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.reconciler.writer.replay = self._replay_from_thread

    # -- start and stop ----------------------------------------------------------------------

    def prime(self) -> None:
        """Compile what planning uses and list every watched kind once (blocking; run in a thread)."""
        started = time.perf_counter()
        compiled = self.reconciler.plans.compile()
        _log.info("Compiled %d rules and templates in %.2f s", compiled, time.perf_counter() - started)
        started = time.perf_counter()
        namespaces: Iterable[str | None] = self.config.namespaces or (None,)
        for kind, selector in WATCHED:
            for namespace in namespaces:
                items = self._list(kind, namespace, selector)
                self.store.replace_all(kind, items, namespace)
        _log.info(
            "Listed what the operator watches in %.2f s: %s", time.perf_counter() - started, self.store.size()
        )

    def relist(self) -> set[str]:
        """List every watched kind again and forget what is gone; the namespaces where something was.

        The resync's safety net, should a watch ever miss a deletion. Blocking; run in a thread. Only
        what was cached before the listing is judged, so an object added meanwhile stays.
        """
        namespaces: Iterable[str | None] = self.config.namespaces or (None,)
        forgotten: set[str] = set()
        for kind, selector in WATCHED:
            for namespace in namespaces:
                before = self.cached_keys(kind, namespace)
                listed = {
                    (str(item["metadata"].get("namespace", "")), str(item["metadata"]["name"]))
                    for item in self._list(kind, namespace, selector)
                }
                forgotten |= self._forget(kind, before - listed)
        return forgotten

    async def served(self, kind: cached.CachedKind) -> bool:
        """Whether the cluster serves `kind` now (API discovery, read in a worker thread)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.client.serves, kind.api)

    def cached_keys(self, kind: cached.CachedKind, namespace: str | None) -> set[Key]:
        """What the cache holds of `kind` (in `namespace`, or everywhere)."""
        return {key for key in self.store.keys(kind) if namespace is None or key[0] == namespace}

    def listed(self, kind: cached.CachedKind, before: set[Key], listed: set[Key]) -> None:
        """A watch stream's listing ended: forget what the cache held `before` it that it did not list.

        Each stream lists before it watches, at start (after `prime`'s listing) and after every break;
        a listing reports what is there, not what went away meanwhile, and an object deleted in between
        would otherwise stay in the cache for good (a superseded repository kept for a pod long gone,
        found by the SIGKILL loop). The resources of those namespaces are queued.
        """
        self._queue_namespaces(self._forget(kind, before - listed))

    def _forget(self, kind: cached.CachedKind, gone: set[Key]) -> set[str]:
        for key in sorted(gone):
            _log.info("%s %s/%s is gone without a deletion event; forgetting it", kind.kind, *key)
            self.store.drop(kind, *key)
            if kind is cached.RESOURCES:
                self.reconciler.forget(*key)
        return {namespace for namespace, _ in gone}

    async def _relist(self) -> None:
        self._queue_namespaces(await asyncio.get_running_loop().run_in_executor(self._executor, self.relist))

    def _queue_namespaces(self, namespaces: set[str]) -> None:
        """Queue every resource in `namespaces` (where something was forgotten)."""
        for key in self.store.keys(cached.RESOURCES):
            if key[0] in namespaces:
                self.queue.add(key)

    def _list(
        self, kind: cached.CachedKind, namespace: str | None, selector: str | None
    ) -> list[dict[str, Any]]:
        """One listing; without the CRD there is nothing to do but say so and wait for it.

        A kind the cluster need not serve (`CachedKind.optional`) lists as empty while it is not served.
        """
        waited = 0.0
        while True:
            try:
                return self.client.list(kind.api_version, kind.kind, namespace, label_selector=selector)
            except ApiError as error:
                if error.not_found and kind.optional:
                    return []
                if not (error.not_found and kind is cached.RESOURCES):
                    raise
            if waited % 30 == 0:
                _log.error(
                    "The MultimodalDeployment CRD is not installed (kubectl apply --server-side -f crds/); "
                    "waiting for it"
                )
            time.sleep(CRD_WAIT_SECONDS)
            waited += CRD_WAIT_SECONDS

    async def start(self) -> None:
        """Prime the cache, queue every resource, and start the workers and the resync."""
        self._loop = asyncio.get_running_loop()
        await asyncio.get_running_loop().run_in_executor(self._executor, self.prime)
        for key in self.store.keys(cached.RESOURCES):
            self.queue.add(key)
        self._tasks = [
            asyncio.create_task(self._work(), name=f"worker-{n}") for n in range(self.config.workers)
        ]
        self._tasks.append(asyncio.create_task(self._resync(), name="resync"))
        if self.config.lost_node_seconds:
            silence = NodeSilence(self.client, self.config.lost_node_seconds)
            self._tasks.append(asyncio.create_task(self._listen_for_silent_nodes(silence), name="nodes"))
        self.ready.set()

    async def stop(self) -> None:
        """Stop the workers (a reconcile in progress finishes in its thread) and release the client."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.queue.cancel_timers()
        self._executor.shutdown(wait=True, cancel_futures=True)
        self.reconciler.events.close()
        self.client.close()

    # -- events ------------------------------------------------------------------------------

    def on_resource(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A MultimodalDeployment was listed, added, changed or deleted."""
        metadata = body.get("metadata", {})
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        _log.debug("%s %s/%s at %s", event_type or "LISTED", *key, metadata.get("resourceVersion"))
        if event_type == "DELETED":
            self.store.drop(cached.RESOURCES, *key)
            self.reconciler.forget(*key)
            return
        if self.store.hold(cached.RESOURCES, event_type, body):
            return  # the operator is writing its status: see `replay`
        if self.store.put(cached.RESOURCES, body):
            self.queue.add(key)

    def on_child(self, kind: cached.CachedKind, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A child (or an engine-cache claim) changed: reconcile every resource it concerns."""
        metadata = body.get("metadata", {})
        namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
        if event_type != "DELETED" and self.store.hold(kind, event_type, body):
            return  # the operator is writing it: see `replay`
        before = self.store.get(kind, namespace, name)
        if event_type == "DELETED":
            self.store.drop(kind, namespace, name)
        elif not self.store.put(kind, body):
            return  # a version the cache holds: the echo of the operator's own write, or a replay
        elif _only_owners_changed(before, self.store.get(kind, namespace, name)):
            return  # a user joined or left a shared child: that user wrote it and knows
        concerned = self._concerned(kind, namespace, name, body)
        _log.debug(
            "%s %s %s/%s queues %d", event_type or "LISTED", kind.kind, namespace, name, len(concerned)
        )
        for key in concerned:
            self.queue.add_after(key, CHILD_EVENT_WINDOW_SECONDS)

    def _replay_from_thread(self, kind: cached.CachedKind, event: cached.HeldEvent) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.replay, kind, event)

    def replay(self, kind: cached.CachedKind, event: cached.HeldEvent) -> None:
        """An event held while the operator wrote its object, and not that write's echo.

        The cache may already hold a newer version (the write's answer), so the event is not asked
        whether it is news: every resource it concerns is queued.
        """
        metadata = event.body.get("metadata", {})
        namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
        self.store.put(kind, event.body)
        if kind is cached.RESOURCES:
            self.queue.add((namespace, name))
            return
        for key in self._concerned(kind, namespace, name, event.body):
            self.queue.add_after(key, CHILD_EVENT_WINDOW_SECONDS)

    def _concerned(
        self, kind: cached.CachedKind, namespace: str, name: str, body: Mapping[str, Any]
    ) -> set[Key]:
        metadata = body.get("metadata", {})
        object_labels = metadata.get("labels") or {}
        names: set[str] = {
            ref["name"]
            for ref in metadata.get("ownerReferences") or []
            if ref.get("kind") == "MultimodalDeployment"
        }
        if instance := object_labels.get(labels.INSTANCE):
            # One resource's own child (its serving pods carry the cacheKey too): nobody else's concern.
            names.add(instance)
            return {(namespace, resource) for resource in names}
        cache_key, claim = object_labels.get(labels.CACHE_KEY), object_labels.get(labels.ENGINE_CACHE_CLAIM)
        if cache_key and claim:
            # A build or download Job, or one of its pods: it concerns the resources that want that engine
            # in that claim, not every user of the claim (all the namespace's resources, by default).
            names.update(self.reconciler.plans.users_of_engine(namespace, cache_key, claim))
        elif cache_key:
            names.update(self.reconciler.plans.users_of_cache_key(namespace, cache_key))
        elif claim:  # the claim's engine index: an engine of any of its users may have landed
            names.update(self.reconciler.plans.users_of_claim(namespace, claim))
        if kind is cached.CLAIMS:
            names.update(self.reconciler.plans.users_of_claim(namespace, name))
        return {(namespace, resource) for resource in names}

    # -- workers -----------------------------------------------------------------------------

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            key = await self.queue.get()
            try:
                outcome = await loop.run_in_executor(self._executor, self.reconciler.reconcile, *key)
            except Exception as error:
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                delay = min(MAX_BACKOFF, 0.5 * 2 ** (failures - 1))
                _log.warning(
                    "Reconcile of %s/%s failed (attempt %d, again in %.1f s): %s",
                    *key,
                    failures,
                    delay,
                    error,
                )
                self.queue.add_after(key, delay)
            else:
                self._failures.pop(key, None)
                if outcome.requeue_after is not None:
                    self.queue.add_after(key, outcome.requeue_after)
            finally:
                self.queue.done(key)

    async def _listen_for_silent_nodes(self, silence: NodeSilence) -> None:
        """Mark the serving pods of silent nodes not ready; their events then reconcile the resources."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(silence.interval)
            try:
                silent = await loop.run_in_executor(self._executor, silence.silent)
                if silent:
                    pods = [
                        (namespace, pod)
                        for namespace, name in self.store.keys(cached.PODS)
                        if (pod := self.store.get(cached.PODS, namespace, name)) is not None
                    ]
                    await loop.run_in_executor(self._executor, silence.mark, pods, silent)
            except Exception:  # a look that fails is retried at the next interval
                _log.exception("Looking for silent nodes failed")

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.config.resync_seconds)
            await self._relist()
            live = self.store.keys(cached.RESOURCES)
            self.reconciler.forget_all_but(live)
            for key in live:
                self.queue.add(key)
