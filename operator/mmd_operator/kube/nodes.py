"""The cluster's nodes as placement and the GPU kinds read them, listed at most once a minute.

A scheduling failure is explained with the nodes' figures (`judgement.placement`), and an engine is built
for the kind of GPU its placement reaches (`judgement.gpu_kinds`). Nodes are not watched: one listing
serves every reconcile for `MAX_AGE` seconds, so a thousand resources cost one request a minute. A
listing is renewed sooner when the scheduler counts another number of nodes than the one held (a node
came or went). Only nodes with allocatable GPUs are kept, as small frozen facts.

Reading nodes is optional (the chart's `rbac.readNodes`): without the setting nothing is asked; without
the permission (403) the operator says so once in its log, reports the spec's side of the sum only, and
asks again every `FORBIDDEN_RETRY` seconds, silently. Any other error keeps the last listing, so a passing
failure neither fails a reconcile nor flips a status back and forth. Imports the client, the fact
converters and the facts.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mmd_operator.facts import Nodes, PodFacts, PodPhase
from mmd_operator.kube import object_facts
from mmd_operator.kube.client import ApiError, KubeClient
from mmd_operator.vocabulary import kinds

_log = logging.getLogger(__name__)
MAX_AGE = 60.0
# The soonest a listing is renewed because the scheduler counts other nodes, or retried after an error.
RETRY_AFTER = 5.0
FORBIDDEN_RETRY = 600.0
_SCHEDULER_COUNT = re.compile(r"\b\d+/(\d+) nodes are available")
_HOLDING = frozenset({PodPhase.PENDING, PodPhase.RUNNING, PodPhase.UNKNOWN})


def nodes_of(items: Iterable[Mapping[str, Any]]) -> Nodes:
    """Node objects, as placement reads them: how many there are, and those with allocatable GPUs."""
    facts = [object_facts.node(item) for item in items]
    return Nodes(total=len(facts), with_gpus=tuple(node for node in facts if node.gpus > 0))


def scheduler_node_count(message: str | None) -> int | None:
    """How many nodes the scheduler weighed, from its message ("0/4 nodes are available: ...")."""
    found = _SCHEDULER_COUNT.search(message or "")
    return int(found.group(1)) if found else None


def requested_by_node(pods: Iterable[PodFacts]) -> tuple[tuple[str, int], ...]:
    """GPUs that `pods` hold, by node: the pods placed on a node and not finished."""
    held: dict[str, int] = {}
    for pod in pods:
        if pod.node and pod.gpus and pod.phase in _HOLDING:
            held[pod.node] = held.get(pod.node, 0) + pod.gpus
    return tuple(sorted(held.items()))


class NodeDirectory:
    """The last listing of the nodes, shared by every reconcile; safe to call from worker threads."""

    def __init__(
        self, client: KubeClient, *, enabled: bool = True, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.client = client
        self.enabled = enabled
        self.clock = clock
        self._lock = threading.Lock()
        self._nodes: Nodes | None = None
        self._listed_at = float("-inf")
        self._tried_at = float("-inf")
        self._forbidden = False

    def nodes(self, scheduler_count: int | None = None, *, renew: bool = False) -> Nodes | None:
        """The nodes, or None when the operator may not read them.

        The listing is at most `MAX_AGE` s old, and renewed sooner (at most every `RETRY_AFTER` s) when
        the scheduler counts `scheduler_count` nodes and it holds another number, or when the caller asks
        (`renew`: a placement that reaches none of the listed nodes, whose pool may just have joined).
        """
        if not self.enabled:
            return None
        with self._lock:
            now = self.clock()
            if self._forbidden:
                if now - self._tried_at < FORBIDDEN_RETRY:
                    return None
            elif self._nodes is not None:
                old = now - self._listed_at >= MAX_AGE
                recount = renew or (scheduler_count is not None and scheduler_count != self._nodes.total)
                if not (old or recount) or now - self._tried_at < RETRY_AFTER:
                    return self._nodes
            elif now - self._tried_at < RETRY_AFTER:
                return None
            self._tried_at = now
            try:
                items = self.client.list(kinds.NODE.api_version, kinds.NODE.kind)
            except ApiError as error:
                if error.status not in (401, 403):
                    _log.debug("Could not list nodes (keeping the last listing): %s", error)
                    return self._nodes
                if not self._forbidden:
                    _log.info(
                        "The operator may not list nodes (%s): scheduling failures name the spec's GPUs "
                        "but not the nodes' (the chart's rbac.readNodes grants it)",
                        error.status,
                    )
                self._forbidden, self._nodes = True, None
                return None
            if self._forbidden:
                _log.info("The operator may list nodes again: scheduling failures name the nodes' GPUs")
            self._forbidden = False
            self._nodes, self._listed_at = nodes_of(items), now
            return self._nodes
