"""Carry out a decision: apply what changed, join or leave shared children, delete, record, report.

Nothing is written when nothing changed: a manifest is applied only when the digest it carries differs
from the one on the cached object (the operator's last apply), and the status only when it differs
from the one the resource shows. Shared children (a build Job, an engine-cache claim) get a user by a
JSON patch that appends its owner reference, and lose one by a merge patch that carries the
resourceVersion it was computed from, so concurrent reconciles of different users never lose each
other's references; the last user out hands the child to an heir (another resource that wants it but
has not joined yet, which the caller names) or, when there is none, deletes it.
Every answer goes back into the cache, so the next reconcile sees the operator's own writes. A group's SSH
Secret is created once (a plain create; AlreadyExists means it is there), with keys made here, and never
read or updated. Imports the client, the cache, the engine
index, the SSH keys, the vocabulary and the builder's result format.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from engine_builder.result_format import BuildSucceeded
from engine_builder.weights_format import DownloadSucceeded
from mmd_operator.api.v1alpha1 import API_VERSION, KIND
from mmd_operator.facts import OwnerRef
from mmd_operator.kube import cache as cached
from mmd_operator.kube import engine_index, ssh_keys
from mmd_operator.kube.client import ApiError, KubeClient
from mmd_operator.vocabulary import hashing, labels, names, ownership
from mmd_operator.vocabulary.ownership import ObjectKey

_log = logging.getLogger(__name__)
_KINDS = {(kind.api_version, kind.kind): kind for kind in cached.KINDS}
_CONFLICT_RETRIES = 3

# Names the resource a shared child passes to when its last owner leaves: given the child's key and the
# object as read, another resource that wants it (None: nobody does, and the child is deleted).
Heir = Callable[[ObjectKey, Mapping[str, Any]], OwnerRef | None]


def _no_heir(key: ObjectKey, live: Mapping[str, Any]) -> OwnerRef | None:
    return None


@dataclass
class WriteCount:
    """What one reconcile wrote."""

    applied: list[str] = field(default_factory=list)
    owners: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Objects written."""
        return len(self.applied) + len(self.owners) + len(self.deleted)


def _cached_hash(store: cached.Cache, kind: cached.CachedKind, namespace: str, name: str) -> str | None:
    value = store.get(kind, namespace, name)
    if value is None:
        return None
    meta = getattr(value, "meta", value)
    annotation = getattr(meta, "annotation", None)
    return annotation(labels.APPLIED_HASH) if annotation is not None else None


def _version(answer: Mapping[str, Any]) -> str:
    return str((answer.get("metadata") or {}).get("resourceVersion", ""))


class Writer:
    """Writes for one namespace's resources, through one client, into one cache.

    `replay` gets the watch events the cache held back while their object was being written and that
    were not its echo (the controller queues the resources they concern).
    """

    def __init__(self, client: KubeClient, store: cached.Cache) -> None:
        self.client = client
        self.store = store
        self.replay: Callable[[cached.CachedKind, cached.HeldEvent], None] = lambda kind, event: None
        # The generated Secrets made or found, by namespace, name and owners' uids.
        self._secrets_made: set[tuple[str, str, tuple[str, ...]]] = set()

    @contextmanager
    def _writing(self, kind: cached.CachedKind, namespace: str, name: str) -> Iterator[cached.WriteOutcome]:
        outcome = cached.WriteOutcome()
        try:
            with self.store.writing(kind, namespace, name) as outcome:
                yield outcome
        finally:
            for event in outcome.others:
                self.replay(kind, event)

    def _put(self, kind: cached.CachedKind, answer: dict[str, Any], outcome: cached.WriteOutcome) -> None:
        self.store.put(kind, answer)
        outcome.version = _version(answer)

    def _write(
        self, kind: cached.CachedKind, namespace: str, name: str, send: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """Send one write of an object and cache its answer, its echo held meanwhile."""
        with self._writing(kind, namespace, name) as outcome:
            answer = send()
            self._put(kind, answer, outcome)
        return answer

    def carry_out(
        self,
        namespace: str,
        owner: OwnerRef,
        count: WriteCount,
        *,
        apply: Iterable[Mapping[str, Any]],
        join: Iterable[ObjectKey],
        leave: Iterable[ObjectKey],
        delete: Iterable[ObjectKey],
        handover: Mapping[str, Any] | None = None,
        handover_manager: str = "",
        generated: Iterable[Mapping[str, Any]] = (),
        heir: Heir = _no_heir,
    ) -> None:
        """Hand `replicas` over, create missing `generated` Secrets, then apply, join, leave and delete.

        In that order, what a decision says. `handover` is applied under `handover_manager` before the
        Deployment's apply drops the field; a shared child `owner` is the last to leave goes to `heir`'s
        choice, if it names one.
        """
        if handover is not None:
            self._write(
                _KINDS[(handover["apiVersion"], handover["kind"])],
                namespace,
                handover["metadata"]["name"],
                lambda: self.client.apply(handover, field_manager=handover_manager),
            )
            count.applied.append(f"{handover['kind']}/{handover['metadata']['name']} replicas handover")
        for manifest in generated:
            self.create_secret(manifest, count)
        for manifest in apply:
            self.apply(manifest, count)
        for key in join:
            self.join(namespace, key, owner, count)
        for key in leave:
            self.leave(namespace, key, owner, count, heir=heir)
        for key in delete:
            self.delete(namespace, key, count)

    def record_build(
        self, namespace: str, claim: str, summary: BuildSucceeded | DownloadSucceeded, count: WriteCount
    ) -> None:
        """Add a finished build or download to the index of `claim` (owned by the claim) and to the cache."""
        claim_facts = self.store.get(cached.CLAIMS, namespace, claim)
        self._write(
            cached.CONFIGMAPS,
            namespace,
            names.engine_index(claim),
            lambda: engine_index.record_build(
                self.client,
                namespace=namespace,
                claim=claim,
                claim_uid=claim_facts.meta.uid if claim_facts is not None else None,
                summary=summary,
            ),
        )
        key = summary.snapshot_key if isinstance(summary, DownloadSucceeded) else summary.cache_key
        count.applied.append(f"engine-index/{key}")

    def apply(self, manifest: Mapping[str, Any], count: WriteCount) -> None:
        """Apply `manifest` unless the cached object already carries its digest."""
        kind = _KINDS[(manifest["apiVersion"], manifest["kind"])]
        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        if _cached_hash(self.store, kind, namespace, name) == hashing.applied_hash(manifest):
            return
        with self._writing(kind, namespace, name) as outcome:
            try:
                live = self.client.apply(manifest)
            except ApiError as error:
                if error.status == 422 and manifest["kind"] == "Job":
                    # An existing Job of this cacheKey made from another user's pod settings: its
                    # template is immutable and it builds the same engine, so join it instead.
                    existing = self.client.get("batch/v1", "Job", namespace, name)
                    if existing is None:
                        raise
                    self.store.put(kind, existing)  # not this write's version: held events still count
                    return
                raise
            self._put(kind, live, outcome)
        count.applied.append(f"{manifest['kind']}/{name}")

    def create_secret(self, manifest: Mapping[str, Any], count: WriteCount) -> None:
        """Create the Secret `manifest` shapes, with new SSH keys, unless it exists: it is never updated.

        One create: an AlreadyExists answer (409) says it is there, so the operator neither reads nor
        patches Secrets (its role grants `create` alone). Once made or found for its owner, it is not
        asked for again while the operator runs: no write at rest. The keys go to the API server only.
        """
        metadata = manifest["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        owners = tuple(str(owner.get("uid", "")) for owner in metadata.get("ownerReferences") or [])
        made = (namespace, name, owners)
        if made in self._secrets_made:
            return
        data = ssh_keys.secret_data(metadata["labels"][labels.INSTANCE])
        try:
            self.client.create({**manifest, "data": data})
        except ApiError as error:
            if not error.conflict:
                raise
        else:
            count.applied.append(f"Secret/{name}")
        self._secrets_made.add(made)

    def forget(self, namespace: str, instance: str) -> None:
        """`instance` was deleted: forget the Secrets made for it (a new resource's are asked for anew)."""
        secret = names.ssh_secret(instance)
        for made in [made for made in self._secrets_made if made[:2] == (namespace, secret)]:
            self._secrets_made.discard(made)

    def join(self, namespace: str, key: ObjectKey, owner: OwnerRef, count: WriteCount) -> None:
        """Add `owner` to the owners of a shared child.

        One JSON patch that appends the reference: the API server applies it to the object as it is
        then, so joins of several users at once all land without reading the child first. The decision
        to join comes from the cache, which holds at least the operator's own last write, so a user is
        never appended twice. A child without owner references (not made by this operator) takes the
        read-and-compare path.
        """
        kind = _KINDS[(key.api_version, key.kind)]
        append = {
            "op": "add",
            "path": "/metadata/ownerReferences/-",
            "value": ownership.owner_reference(owner, controller=False),
        }
        with self._writing(kind, namespace, key.name) as outcome:
            try:
                updated = self.client.json_patch(key.api_version, key.kind, namespace, key.name, [append])
            except ApiError as error:
                if error.not_found:
                    self.store.drop(kind, namespace, key.name)
                    return
                if error.status != 422:
                    raise
                updated = None
            if updated is not None:
                self._put(kind, updated, outcome)
        if updated is None:
            self._change_owners(namespace, key, owner, joining=True, count=count)
            return
        count.owners.append(f"{key.kind}/{key.name}")

    def leave(
        self, namespace: str, key: ObjectKey, owner: OwnerRef, count: WriteCount, *, heir: Heir = _no_heir
    ) -> None:
        """Remove `owner` from a shared child's owners; when nobody is left, pass it to `heir` or delete it.

        A build another resource wants outlives the first user's move to another engine even when that
        resource has not joined it yet (its reconcile is still queued): deleted, it would be built twice.
        """
        self._change_owners(namespace, key, owner, joining=False, count=count, heir=heir)

    def _change_owners(
        self,
        namespace: str,
        key: ObjectKey,
        owner: OwnerRef,
        *,
        joining: bool,
        count: WriteCount,
        heir: Heir = _no_heir,
    ) -> None:
        kind = _KINDS[(key.api_version, key.kind)]
        for _ in range(_CONFLICT_RETRIES):
            live = self.client.get(key.api_version, key.kind, namespace, key.name)
            if live is None:
                self.store.drop(kind, namespace, key.name)
                return
            metadata = live["metadata"]
            references = list(metadata.get("ownerReferences") or [])
            ours = [r for r in references if r.get("uid") == owner.uid]
            if joining == bool(ours):
                self.store.put(kind, live)
                return
            if joining:
                references.append(ownership.owner_reference(owner, controller=False))
            else:
                references = [r for r in references if r.get("uid") != owner.uid]
                users = [
                    r for r in references if r.get("kind") == KIND and r.get("apiVersion") == API_VERSION
                ]
                successor = heir(key, live) if not users else None
                if successor is not None:
                    references.append(ownership.owner_reference(successor, controller=False))
                    _log.info("%s/%s passes to %s, which wants it too", key.kind, key.name, successor.name)
                elif not users:
                    self.client.delete(
                        key.api_version, key.kind, namespace, key.name, uid=metadata.get("uid")
                    )
                    self.store.drop(kind, namespace, key.name)
                    count.deleted.append(f"{key.kind}/{key.name}")
                    return
            patch = {
                "metadata": {"resourceVersion": metadata["resourceVersion"], "ownerReferences": references}
            }
            with self._writing(kind, namespace, key.name) as outcome:
                try:
                    updated = self.client.merge_patch(key.api_version, key.kind, namespace, key.name, patch)
                except ApiError as error:
                    if error.conflict:
                        continue  # somebody else changed it: read it again and redo the change
                    raise
                self._put(kind, updated, outcome)
            count.owners.append(f"{key.kind}/{key.name}")
            return
        raise ApiError(409, "Conflict", f"{key.kind}/{key.name} kept changing while its owners were updated")

    def delete(self, namespace: str, key: ObjectKey, count: WriteCount) -> None:
        """Delete one object (and, in the background, what it owns)."""
        kind = _KINDS[(key.api_version, key.kind)]
        if self.client.delete(key.api_version, key.kind, namespace, key.name):
            count.deleted.append(f"{key.kind}/{key.name}")
        self.store.drop(kind, namespace, key.name)

    def status(self, resource: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Apply the status subresource; returns the resource as the API server now has it."""
        metadata = resource["metadata"]
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": metadata["name"], "namespace": metadata["namespace"]},
            "status": status,
        }
        return self._write(
            cached.RESOURCES,
            metadata["namespace"],
            metadata["name"],
            lambda: self.client.apply(body, subresource="status"),
        )
