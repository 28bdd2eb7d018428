"""Posts the operator's Events from a thread of its own, so no reconcile waits for one.

A reconcile hands its events over and goes on; one sender thread posts them in order. An Event is a
courtesy to the person running `kubectl describe`: losing one (the API server refused it, the operator
stopped with some still queued past the grace period) never fails or delays a reconcile, as with
client-go's event broadcaster. Imports the client.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mmd_operator.kube.client import KubeClient

_log = logging.getLogger(__name__)


class EventRecorder:
    """Events about MultimodalDeployments, posted in the background in the order they were recorded."""

    def __init__(self, client: KubeClient, component: str) -> None:
        self.client = client
        self.component = component
        self._sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="events")

    def record(self, involved: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
        """Queue an Event about `involved` (the resource as the API server last returned it)."""
        # Only what the Event names of it: the queue can run hundreds deep while a thousand resources
        # start at once, and whole resources held there were the largest part of the operator's memory.
        metadata = involved["metadata"]
        reference = {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "metadata": {key: metadata.get(key) for key in ("name", "namespace", "uid", "resourceVersion")},
        }
        self._sender.submit(self._post, reference, type, reason, message)

    def _post(self, involved: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        # The client logs the API server's refusals itself; what reaches here is a lost connection and
        # the like, which would otherwise vanish unseen in the sender's future.
        try:
            self.client.post_event(
                involved, type=type, reason=reason, message=message, component=self.component
            )
        except Exception as error:
            _log.warning("Could not post event %s: %s", reason, error)

    def close(self) -> None:
        """Post what is queued, then stop the sender."""
        self._sender.shutdown(wait=True)
