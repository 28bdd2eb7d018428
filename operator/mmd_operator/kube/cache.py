"""The operator's local copy of the objects it watches, kept current by watch events and its own writes.

Reconciles read children from here, never by listing the API server per resource. Watch events (from
kopf's streams) and the answers of the operator's own writes both update it, so a write is visible to
the next reconcile at once. It holds facts, not whole objects, indexed by what lookups ask: a resource's
children by instance label, a build's pods by Job name, anything by owner. Thread
safe: watch handlers run on the event loop, reconciles in worker threads. Imports the fact converters.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson

from mmd_operator.facts import ClaimFacts, DeploymentFacts, JobFacts, Meta, PodFacts
from mmd_operator.kube import object_facts
from mmd_operator.kube.engine_index import EngineIndex
from mmd_operator.vocabulary import kinds, labels
from mmd_operator.vocabulary.kinds import ApiKind

Key = tuple[str, str]  # namespace, name


def _as_is(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class CachedKind:
    """A kind the cache holds: its API coordinates, how an object becomes a fact, and back for readers."""

    api: ApiKind
    convert: Callable[[Mapping[str, Any]], Any]
    expand: Callable[[Any], Any] = _as_is
    # A kind the cluster may not serve (a CRD of another project): listed as empty, watched once served.
    optional: bool = False

    @property
    def api_version(self) -> str:
        """The kind's apiVersion."""
        return self.api.api_version

    @property
    def kind(self) -> str:
        """The kind's name."""
        return self.api.kind


def _slim_resource(obj: Mapping[str, Any]) -> bytes:
    """A MultimodalDeployment without its managed fields, held as compact JSON.

    Reconciles need the whole resource (its spec, and the status to compare with), but read one at a
    time: parsed, a resource took about 17 KiB of dicts and strings, as JSON under 4 KiB, and parsing it
    back for a reconcile costs a fraction of a millisecond.
    """
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return orjson.dumps({**obj, "metadata": metadata})


def _parsed(value: bytes) -> dict[str, Any]:
    parsed: dict[str, Any] = orjson.loads(value)
    return parsed


def _configmap(obj: Mapping[str, Any]) -> Meta | EngineIndex:
    facts = object_facts.meta(obj)
    if facts.label(labels.COMPONENT) == labels.ENGINE_INDEX:
        return EngineIndex.from_configmap_data(obj.get("data"))
    return facts


RESOURCES = CachedKind(kinds.MULTIMODAL_DEPLOYMENT, _slim_resource, _parsed)
JOBS = CachedKind(kinds.JOB, object_facts.job)
PODS = CachedKind(kinds.POD, object_facts.pod)
DEPLOYMENTS = CachedKind(kinds.DEPLOYMENT, object_facts.deployment)
CONFIGMAPS = CachedKind(kinds.CONFIGMAP, _configmap)
SERVICES = CachedKind(kinds.SERVICE, object_facts.meta)
CLAIMS = CachedKind(kinds.CLAIM, object_facts.claim)
NETWORK_POLICIES = CachedKind(kinds.NETWORK_POLICY, object_facts.meta)
AUTOSCALERS = CachedKind(kinds.HORIZONTAL_POD_AUTOSCALER, object_facts.autoscaler)
DISRUPTION_BUDGETS = CachedKind(kinds.POD_DISRUPTION_BUDGET, object_facts.meta)
# Watched only where the cluster serves it (`optional`): its CRD comes with the LeaderWorkerSet controller.
LEADER_WORKER_SETS = CachedKind(kinds.LEADER_WORKER_SET, object_facts.leader_worker_set, optional=True)
# Watched only where the cluster serves Dynamic Resource Allocation (`resource.k8s.io/v1`).
CLAIM_TEMPLATES = CachedKind(kinds.RESOURCE_CLAIM_TEMPLATE, object_facts.meta, optional=True)
KINDS = (
    RESOURCES,
    JOBS,
    PODS,
    DEPLOYMENTS,
    CONFIGMAPS,
    SERVICES,
    CLAIMS,
    NETWORK_POLICIES,
    AUTOSCALERS,
    DISRUPTION_BUDGETS,
    LEADER_WORKER_SETS,
    CLAIM_TEMPLATES,
)


@dataclass(frozen=True)
class HeldEvent:
    """A watch event that arrived while the operator was writing its object."""

    event_type: str | None
    body: Mapping[str, Any]
    version: str


@dataclass
class WriteOutcome:
    """What a write under `Cache.writing` made (`version`), and the events held meanwhile (`others`)."""

    version: str | None = None
    others: list[HeldEvent] = field(default_factory=list)


def _labels_of(value: Any) -> Mapping[str, str]:
    facts = getattr(value, "meta", value)
    return dict(facts.labels) if isinstance(facts, Meta) else {}


def _owner_uids(value: Any) -> set[str]:
    facts = getattr(value, "meta", value)
    return {owner.uid for owner in facts.owners} if isinstance(facts, Meta) else set()


class Cache:
    """Facts of watched objects, by kind and (namespace, name), with secondary indexes."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._objects: dict[str, dict[Key, Any]] = defaultdict(dict)
        self._by_instance: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        self._by_job: dict[tuple[str, str], set[str]] = defaultdict(set)
        # Every reconcile asks for the Jobs and claims its resource owns: a scan of all of them made
        # reconciling N resources cost N^2 (a shared build Job has every user among its owners).
        self._by_owner: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        # resourceVersions are etcd revisions: an older one is a version the cache has seen superseded.
        self._versions: dict[str, dict[Key, str]] = defaultdict(dict)
        # The operator's writes in flight, and the watch events of their objects that arrived meanwhile.
        self._writing: dict[tuple[str, Key], int] = defaultdict(int)
        self._held: dict[tuple[str, Key], list[HeldEvent]] = defaultdict(list)

    @contextmanager
    def writing(self, kind: CachedKind, namespace: str, name: str) -> Iterator[WriteOutcome]:
        """Hold the watch events of one object while the operator writes it (see `hold`).

        The caller puts the answer into the cache and sets the outcome's `version`. Afterwards the
        outcome's `others` are the events held meanwhile that are not the echo of that version (all of
        them, if the write failed), for the caller to hand back to the controller.
        """
        slot = (kind.kind, (namespace, name))
        outcome = WriteOutcome()
        with self._lock:
            self._writing[slot] += 1
        try:
            yield outcome
        finally:
            held: list[HeldEvent] = []
            with self._lock:
                self._writing[slot] -= 1
                if not self._writing[slot]:  # the last write of this object in flight
                    del self._writing[slot]
                    held = self._held.pop(slot, [])
            outcome.others = [event for event in held if event.version != outcome.version]

    def hold(self, kind: CachedKind, event_type: str | None, body: Mapping[str, Any]) -> bool:
        """Keep a watch event of an object the operator is writing; True when it was kept.

        A write's echo can come back on the watch before the write's answer reaches the cache; taken as
        news it would queue a reconcile for nothing (every user of a shared build Job, for a Job). The
        event waits for the answer instead, and is dropped if it brings the version the write made.
        """
        metadata = body.get("metadata") or {}
        slot = (kind.kind, (str(metadata.get("namespace", "")), str(metadata.get("name", ""))))
        with self._lock:
            if slot not in self._writing:
                return False
            version = str(metadata.get("resourceVersion", ""))
            self._held[slot].append(HeldEvent(event_type, body, version))
        return True

    def put(self, kind: CachedKind, obj: Mapping[str, Any]) -> bool:
        """Store (or replace) the fact of `obj`, unless the cache holds this version or a newer one.

        The operator puts what its own writes return, and a watch can deliver an older version after
        that (a late event, or a replay when a watch restarts, as when the CRD changes); acting on it
        would undo a write or report a world that has moved on. Returns whether `obj` was news: the
        watch echo of the operator's own write (the version and content the cache holds) is not, and
        needs no reconcile.
        """
        metadata = obj.get("metadata") or {}
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        version = str(metadata.get("resourceVersion", ""))
        value = kind.convert(obj)
        with self._lock:
            held = self._versions[kind.kind].get(key, "")
            if version.isdigit() and held.isdigit() and int(version) < int(held):
                return False
            if version == held and self._objects[kind.kind].get(key) == value:
                return False
            # The same version can still read two ways: right after a CRD changes, the old schema
            # prunes fields the new one has. The later read wins.
            self._versions[kind.kind][key] = version
            self._unindex(kind.kind, key)
            self._objects[kind.kind][key] = value
            self._index(kind.kind, key, _labels_of(value) or (metadata.get("labels") or {}), value)
        return True

    def drop(self, kind: CachedKind, namespace: str, name: str) -> None:
        """Forget an object that was deleted."""
        with self._lock:
            self._unindex(kind.kind, (namespace, name))
            self._objects[kind.kind].pop((namespace, name), None)
            self._versions[kind.kind].pop((namespace, name), None)

    def replace_all(
        self, kind: CachedKind, items: Sequence[Mapping[str, Any]], namespace: str | None = None
    ) -> None:
        """Replace everything of `kind` (in `namespace`) with a fresh listing."""
        with self._lock:
            for key in [k for k in self._objects[kind.kind] if namespace is None or k[0] == namespace]:
                self.drop(kind, *key)
            for item in items:
                self.put(kind, item)

    def get(self, kind: CachedKind, namespace: str, name: str) -> Any:
        """The fact of one object, or None."""
        with self._lock:
            value = self._objects[kind.kind].get((namespace, name))
        return kind.expand(value) if value is not None else None

    def all(self, kind: CachedKind, namespace: str | None = None) -> list[Any]:
        """Every fact of `kind` (in `namespace`)."""
        with self._lock:
            return [
                kind.expand(v)
                for (ns, _), v in self._objects[kind.kind].items()
                if namespace is None or ns == namespace
            ]

    def keys(self, kind: CachedKind) -> list[Key]:
        """Every (namespace, name) of `kind`."""
        with self._lock:
            return list(self._objects[kind.kind])

    def of_instance(self, kind: CachedKind, namespace: str, instance: str) -> list[Any]:
        """Children of `kind` labelled as belonging to `instance`."""
        with self._lock:
            names = self._by_instance.get((kind.kind, namespace, instance), set())
            return [kind.expand(self._objects[kind.kind][(namespace, n)]) for n in sorted(names)]

    def pods_of_job(self, namespace: str, job: str) -> list[PodFacts]:
        """The pods a Job created."""
        with self._lock:
            names = self._by_job.get((namespace, job), set())
            return [self._objects[PODS.kind][(namespace, n)] for n in sorted(names)]

    def owned_by(self, kind: CachedKind, namespace: str, uid: str) -> list[Any]:
        """Objects of `kind` in `namespace` with `uid` among their owners."""
        with self._lock:
            names = self._by_owner.get((kind.kind, namespace, uid), set())
            return [self._objects[kind.kind][(namespace, n)] for n in sorted(names)]

    def size(self) -> dict[str, int]:
        """Objects held, by kind."""
        with self._lock:
            return {kind: len(values) for kind, values in self._objects.items()}

    def _index(self, kind: str, key: Key, object_labels: Mapping[str, str], value: Any) -> None:
        namespace, name = key
        if instance := object_labels.get(labels.INSTANCE):
            self._by_instance[(kind, namespace, instance)].add(name)
        if kind == PODS.kind and (job := object_labels.get(object_facts.JOB_NAME_LABEL)):
            self._by_job[(namespace, job)].add(name)
        for uid in _owner_uids(value):
            self._by_owner[(kind, namespace, uid)].add(name)

    def _unindex(self, kind: str, key: Key) -> None:
        old = self._objects[kind].get(key)
        if old is None:
            return
        namespace, name = key
        if isinstance(old, bytes):
            old = _parsed(old)
        old_labels = _labels_of(old) or (
            old.get("metadata", {}).get("labels") or {} if isinstance(old, dict) else {}
        )
        if instance := old_labels.get(labels.INSTANCE):
            self._by_instance[(kind, namespace, instance)].discard(name)
        if kind == PODS.kind and (job := old_labels.get(object_facts.JOB_NAME_LABEL)):
            self._by_job[(namespace, job)].discard(name)
        for uid in _owner_uids(old):
            owned = self._by_owner[(kind, namespace, uid)]
            owned.discard(name)
            if not owned:
                del self._by_owner[(kind, namespace, uid)]


__all__ = [
    "AUTOSCALERS",
    "CLAIMS",
    "CLAIM_TEMPLATES",
    "CONFIGMAPS",
    "DEPLOYMENTS",
    "DISRUPTION_BUDGETS",
    "JOBS",
    "KINDS",
    "NETWORK_POLICIES",
    "PODS",
    "RESOURCES",
    "SERVICES",
    "Cache",
    "CachedKind",
    "ClaimFacts",
    "DeploymentFacts",
    "JobFacts",
]
