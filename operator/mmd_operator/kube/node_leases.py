"""Silent nodes: list the node Leases and mark the serving pods on a silent node not ready.

`judgement.node_silence` says which nodes are silent and which pods to mark.

One listing of `kube-node-lease` every `interval` seconds, and nothing else while every node is heard.
The mark is a strategic-merge patch of the pod's `status` (its Ready condition); the Service drops the
pod from its endpoints at once, the ReplicaSet leaves it (the node controller evicts it later, as
before). Optional (the chart's `lostNodeSeconds`, 0 turns it off); without the permission to list the
Leases (403) the operator says so once in its log and asks again every `FORBIDDEN_RETRY` seconds.
Imports the client, the judgement, the facts and the metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from mmd_operator import metrics
from mmd_operator.facts import PodFacts
from mmd_operator.judgement import node_silence
from mmd_operator.kube.client import ApiError, KubeClient, path
from mmd_operator.vocabulary import kinds

_log = logging.getLogger(__name__)
NAMESPACE = "kube-node-lease"
FORBIDDEN_RETRY = 600.0


class NodeSilence:
    """The record of the node Leases' renewals, and the pods marked for it; one caller at a time."""

    def __init__(
        self, client: KubeClient, after_seconds: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.client = client
        self.after_seconds = after_seconds
        self.clock = clock
        self._record: dict[str, node_silence.Heard] = {}
        self._forbidden_at: float | None = None

    @property
    def interval(self) -> float:
        """How often to look: a fifth of the silence that counts, so a mark comes at most that late."""
        return max(1.0, self.after_seconds / 5)

    def silent(self) -> frozenset[str]:
        """List the Leases and say which nodes are silent (none when the listing fails)."""
        now = self.clock()
        if self._forbidden_at is not None and now - self._forbidden_at < FORBIDDEN_RETRY:
            return frozenset()
        try:
            leases = self.client.list(kinds.LEASE.api_version, kinds.LEASE.kind, NAMESPACE)
        except ApiError as error:
            if error.status in (401, 403):
                if self._forbidden_at is None:
                    _log.info(
                        "The operator may not list the node Leases (%s): a dead node's serving pods stay "
                        "in their Service until the node controller marks them (the chart's "
                        "lostNodeSeconds grants it)",
                        error.status,
                    )
                self._forbidden_at = now
            else:
                _log.debug("Could not list the node Leases: %s", error)
            return frozenset()
        self._forbidden_at = None
        renewals = {
            str(lease["metadata"]["name"]): str((lease.get("spec") or {}).get("renewTime") or "")
            for lease in leases
        }
        self._record = node_silence.heard(self._record, renewals, now)
        return node_silence.silent_nodes(self._record, now, self.after_seconds)

    def mark(self, pods: Iterable[tuple[str, PodFacts]], silent: frozenset[str]) -> list[str]:
        """Mark the serving pods on `silent` nodes not ready; `namespace/name` of each one marked."""
        now = self.clock()
        when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        marked: list[str] = []
        for namespace, pod in node_silence.pods_to_mark(pods, silent):
            node = str(pod.node)
            quiet = now - self._record[node].at
            target = f"{path(kinds.POD.api_version, kinds.POD.kind, namespace, pod.meta.name)}/status"
            try:
                self.client.request(
                    "PATCH",
                    target,
                    body=node_silence.not_ready_patch(node, quiet, when),
                    content_type="application/strategic-merge-patch+json",
                )
            except ApiError as error:
                _log.warning("Could not mark pod %s/%s not ready: %s", namespace, pod.meta.name, error)
                continue
            metrics.PODS_MARKED_NOT_READY.inc()
            _log.warning(
                "Node %s has not renewed its Lease for %.0f s: marked serving pod %s/%s not ready",
                node,
                quiet,
                namespace,
                pod.meta.name,
            )
            marked.append(f"{namespace}/{pod.meta.name}")
        return marked
