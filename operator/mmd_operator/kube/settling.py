"""A resource's spec as the reconcile may act on it: read again while it reads two ways.

A generation has one spec. Right after its CRD changes, the API server can still answer some reads and
watches through the old schema, which prunes the fields it does not know: the same generation then
arrives in two shapes, and acting on the pruned one would roll the pods back. When that happens the
operator waits, then reads the resource again, until two reads agree. A new generation is read once
more a few seconds after it arrives, since the read that brought it may have been the last event to
come. Imports the client, the cache and the digests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from mmd_operator.api.v1alpha1 import API_VERSION, KIND
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import KubeClient
from mmd_operator.vocabulary import hashing

_log = logging.getLogger(__name__)
# How long to wait before reading again a resource whose spec read two ways.
REREAD_SECONDS = 2.0
# How long after a new generation arrives the operator reads it once more.
CONFIRM_SECONDS = 3.0
# What `body` returns while a resource's spec reads two ways.
UNSETTLED: Mapping[str, Any] = {"metadata": {}}
Key = tuple[str, str]


class SpecSettling:
    """The spec each resource was last reconciled with (by uid and generation), and the reads due."""

    def __init__(
        self, client: KubeClient, store: cached.Cache, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._client = client
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[Key, tuple[str, int, str]] = {}
        self._reread: set[Key] = set()
        self._confirm: dict[Key, float] = {}

    def body(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The resource to reconcile, None when it is gone, or `UNSETTLED` while its spec reads two ways."""
        key = (namespace, name)
        with self._lock:
            due = self._confirm.get(key)
            confirm = due is not None and self._clock() >= due
            if confirm:
                del self._confirm[key]
            reread = key in self._reread or confirm
            self._reread.discard(key)
        if reread:
            fresh = self._client.get(API_VERSION, KIND, namespace, name)
            if fresh is None:
                return None
            self._store.put(cached.RESOURCES, fresh)
        body: Mapping[str, Any] | None = self._store.get(cached.RESOURCES, namespace, name)
        if body is None:
            return None
        metadata = body.get("metadata", {})
        seen = (
            str(metadata.get("uid", "")),
            int(metadata.get("generation", 1)),
            hashing.digest(body.get("spec")),
        )
        with self._lock:
            last = self._seen.get(key)
            self._seen[key] = seen
            if last is not None and last[0] == seen[0] and last[1] < seen[1]:
                self._confirm[key] = self._clock() + CONFIRM_SECONDS
            if last is not None and last[:2] == seen[:2] and last[2] != seen[2]:
                self._reread.add(key)
                _log.warning(
                    "%s/%s generation %d reads with two different specs (its CRD just changed?); "
                    "reading it again in %.0f s",
                    namespace,
                    name,
                    seen[1],
                    REREAD_SECONDS,
                )
                return UNSETTLED
        return body

    def confirm_in(self, namespace: str, name: str) -> float | None:
        """Seconds until the confirming read of a new generation is due, if one is."""
        with self._lock:
            due = self._confirm.get((namespace, name))
        return None if due is None else max(due - self._clock(), 0.1)

    def forget(self, key: Key) -> None:
        """`key` is gone."""
        with self._lock:
            self._seen.pop(key, None)
            self._reread.discard(key)
            self._confirm.pop(key, None)

    def known(self) -> set[Key]:
        """Every resource with a spec seen here."""
        with self._lock:
            return set(self._seen)
