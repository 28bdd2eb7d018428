"""A namespace's ResourceQuotas, listed only while a Job or the serving workload lacks its pods.

A pod a quota refuses is never created: the Job controller says so only in an Event and the ReplicaSet
controller in the Deployment's ReplicaFailure condition, so the operator reads the quotas themselves
to say which one refuses which pod and by how much (`judgement.quotas`). Quotas are not watched: a
reconcile asks for a namespace's only when it finds pods missing, and one listing serves every reconcile
in that namespace for `MAX_AGE` seconds. Without the permission (403; the chart grants it) the operator
says so once in its log, and asks again every `FORBIDDEN_RETRY` seconds, silently; any other error keeps
the last listing. Imports the client, the fact converters and the facts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from mmd_operator.facts import QuotaFacts
from mmd_operator.kube import object_facts
from mmd_operator.kube.client import ApiError, KubeClient
from mmd_operator.vocabulary import kinds

_log = logging.getLogger(__name__)
MAX_AGE = 15.0
FORBIDDEN_RETRY = 600.0


class QuotaDirectory:
    """The last listing of each namespace's ResourceQuotas; safe to call from worker threads."""

    def __init__(self, client: KubeClient, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._lock = threading.Lock()
        self._listed: dict[str, tuple[float, tuple[QuotaFacts, ...]]] = {}
        self._forbidden_at: float | None = None

    def quotas(self, namespace: str) -> tuple[QuotaFacts, ...] | None:
        """The quotas of `namespace`, at most `MAX_AGE` s old; None when the operator may not read them."""
        with self._lock:
            now = self.clock()
            if self._forbidden_at is not None and now - self._forbidden_at < FORBIDDEN_RETRY:
                return None
            held = self._listed.get(namespace)
            if held is not None and now - held[0] < MAX_AGE:
                return held[1]
            try:
                items = self.client.list(
                    kinds.RESOURCE_QUOTA.api_version, kinds.RESOURCE_QUOTA.kind, namespace
                )
            except ApiError as error:
                if error.status not in (401, 403):
                    _log.debug(
                        "Could not list the quotas of %s (keeping the last listing): %s", namespace, error
                    )
                    return held[1] if held is not None else None
                if self._forbidden_at is None:
                    _log.info(
                        "The operator may not list ResourceQuotas (%s): a pod a quota refuses is reported "
                        "without the quota's figures",
                        error.status,
                    )
                self._forbidden_at = now
                return None
            self._forbidden_at = None
            found = tuple(object_facts.quota(item) for item in items)
            self._listed[namespace] = (now, found)
            return found
