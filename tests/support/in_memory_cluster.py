"""The operator's I/O half on the in-memory API server: its client and cache, the watch that feeds the cache,
and the parts of a cluster the unit tier plays itself (a user's kubectl, the Job controller and kubelet
finishing a Job).

`InMemoryCluster.feed` delivers the watch events the operator's streams would deliver since the last
feed (only the kinds and labels it watches, `controller.WATCHED`), to the cache as the controller's
handlers store them, or to any handler. Imports the operator's cache, controller table, client and
vocabulary, and the in-memory API server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mmd_operator.controller import WATCHED
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import KubeClient
from mmd_operator.vocabulary import kinds
from tests.support.in_memory_api import InMemoryApiServer, Request, WatchEvent

Handler = Callable[[cached.CachedKind, str, Mapping[str, Any]], None]
_WATCHED = {kind.api: (kind, selector) for kind, selector in WATCHED}
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def _selected(labels: Mapping[str, str], selector: str | None) -> bool:
    return all(
        labels.get(key) == value
        for key, _, value in (term.partition("=") for term in (selector or "").split(",") if term)
    )


@dataclass
class InMemoryCluster:
    """The in-memory API server, the operator's client and cache on it, and the events not yet fed."""

    server: InMemoryApiServer = field(default_factory=InMemoryApiServer)
    store: cached.Cache = field(default_factory=cached.Cache)
    fed: int = 0

    def __post_init__(self) -> None:
        self.client: KubeClient = self.server.client()
        self.kubectl: KubeClient = self.server.client("kubectl")

    def pending(self) -> list[WatchEvent]:
        """The watch events since the last feed, of what the operator watches."""
        events = self.server.events[self.fed :]
        self.fed += len(events)
        return [
            event
            for event in events
            if event.kind in _WATCHED
            and _selected(event.object["metadata"].get("labels") or {}, _WATCHED[event.kind][1])
        ]

    def feed(self, handler: Handler | None = None) -> int:
        """Deliver the pending watch events to `handler` (default: into the cache); how many there were."""
        events = self.pending()
        for event in events:
            (handler or self._store_event)(_WATCHED[event.kind][0], event.type, event.object)
        return len(events)

    def _store_event(self, kind: cached.CachedKind, event_type: str, body: Mapping[str, Any]) -> None:
        metadata = body["metadata"]
        if event_type == "DELETED":
            self.store.drop(kind, metadata.get("namespace", ""), metadata["name"])
        else:
            self.store.put(kind, body)

    def create(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """Apply `document` as a user does (`kubectl apply --server-side`)."""
        return self.kubectl.apply(document)

    def finish_job(self, namespace: str, name: str, message: str) -> None:
        """End Job `name` as the Job controller and kubelet would: one pod that said `message`, Complete."""
        job = self.server.get(kinds.JOB, namespace, name)
        assert job is not None, f"no Job {name}"
        template = job["spec"]["template"]
        pod_labels = {**(template.get("metadata") or {}).get("labels", {}), JOB_NAME_LABEL: name}
        owner = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": name,
            "uid": job["metadata"]["uid"],
            "controller": True,
        }
        pod_name = f"{name}-done"
        identity = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name, "namespace": namespace}}
        controller, kubelet = self.server.client("job-controller"), self.server.client("kubelet")
        controller.apply(
            {
                **identity,
                "metadata": {**identity["metadata"], "labels": pod_labels, "ownerReferences": [owner]},
                "spec": template["spec"],
            }
        )
        container = template["spec"]["containers"][0]["name"]
        terminated = {"exitCode": 0, "reason": "Completed", "message": message}
        kubelet.apply(
            {
                **identity,
                "status": {
                    "phase": "Succeeded",
                    "containerStatuses": [{"name": container, "state": {"terminated": terminated}}],
                },
            },
            subresource="status",
        )
        done = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
        controller.apply(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": name, "namespace": namespace},
                "status": done,
            },
            subresource="status",
        )


def the_operators_writes(cluster: InMemoryCluster, since: int = 0) -> list[Request]:
    """The operator's requests that were not reads, from the `since`th request on, its Events left out.

    An Event is only recorded with a status write, which these include.
    """
    return [
        request
        for request in cluster.server.requests[since:]
        if request.method != "GET" and not request.path.endswith("/events")
    ]
