"""The leader election's one Lease (coordination.k8s.io/v1): read it, create it, update it.

Every update carries the resourceVersion last read, so of two candidates writing at once one gets 409
Conflict and reads again; that, not any clock, is what makes one leader. Requests are bounded by the
timeout the caller gives (a leader's is what is left of its renew deadline) and are not retried by the
connection pool. Failures come back as two exceptions: `LeaseConflictError` (someone else wrote first) and
`LeaseUnavailableError` (no answer, or an answer that is no decision: 5xx, 403, a refused connection).
Imports the client, the election's record and urllib3 (the client's transport).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import urllib3

from mmd_operator.election import LeaseRecord
from mmd_operator.kube.client import ApiError, KubeClient, KubeconfigError, path
from mmd_operator.vocabulary.kinds import LEASE

# Where a pod finds the namespace it runs in.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class LeaseConflictError(Exception):
    """Someone else wrote the Lease (or created it) since it was read."""


class LeaseUnavailableError(Exception):
    """The Lease could not be read or written: no answer, or one that decides nothing."""


def home_namespace() -> str:
    """The namespace the operator runs in: its pod's, else the kubeconfig context's, else `default`."""
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    except OSError:
        pass
    try:
        return KubeClient.kubeconfig_namespace()
    except KubeconfigError:
        return "default"


def _record(lease: dict[str, Any]) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        lease_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=str(spec.get("acquireTime") or ""),
        renew_time=str(spec.get("renewTime") or ""),
        transitions=int(spec.get("leaseTransitions") or 0),
    )


def _spec(record: LeaseRecord) -> dict[str, Any]:
    return {
        "holderIdentity": record.holder,
        "leaseDurationSeconds": record.lease_seconds,
        "acquireTime": record.acquire_time,
        "renewTime": record.renew_time,
        "leaseTransitions": record.transitions,
    }


class Leases:
    """Reads and writes of the Lease `namespace/name`."""

    def __init__(self, client: KubeClient, namespace: str, name: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    def read(self, *, timeout: float) -> tuple[LeaseRecord | None, str]:
        """The record and resourceVersion of the Lease; (None, "") when there is none.

        Raises:
            LeaseUnavailableError: when the API server does not answer with the Lease or its absence.
        """
        lease = self._send("GET", path(LEASE.api_version, LEASE.kind, self.namespace, self.name), timeout)
        if lease is None:
            return None, ""
        return _record(lease), str(lease["metadata"]["resourceVersion"])

    def create(self, record: LeaseRecord, *, timeout: float) -> str:
        """Create the Lease holding `record`; its resourceVersion.

        Raises:
            LeaseConflictError: when it exists already.
            LeaseUnavailableError: when the API server does not answer with a decision, or the namespace
                does not exist.
        """
        body = {
            "apiVersion": LEASE.api_version,
            "kind": LEASE.kind,
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": _spec(record),
        }
        created = self._send("POST", path(LEASE.api_version, LEASE.kind, self.namespace), timeout, body)
        if created is None:
            raise LeaseUnavailableError(f"the namespace {self.namespace} of the Lease {self} does not exist")
        return self._version(created)

    def update(self, record: LeaseRecord, version: str, *, timeout: float) -> str:
        """Replace the Lease's record, only if it is still at `version`; the new resourceVersion.

        Raises:
            LeaseConflictError: when the Lease changed since `version` (or is gone).
            LeaseUnavailableError: when the API server does not answer with a decision.
        """
        body = {
            "apiVersion": LEASE.api_version,
            "kind": LEASE.kind,
            "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": version},
            "spec": _spec(record),
        }
        target = path(LEASE.api_version, LEASE.kind, self.namespace, self.name)
        return self._version(self._send("PUT", target, timeout, body))

    def _version(self, lease: dict[str, Any] | None) -> str:
        if lease is None:  # an update of a Lease deleted meanwhile: someone else's doing
            raise LeaseConflictError(f"the Lease {self} is gone")
        return str(lease["metadata"]["resourceVersion"])

    def _send(
        self, method: str, url_path: str, timeout: float, body: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        try:
            return self.client.request(method, url_path, body=body, timeout=max(0.1, timeout))
        except ApiError as error:
            if error.not_found:
                return None
            if error.conflict:
                raise LeaseConflictError(str(error)) from None
            raise LeaseUnavailableError(str(error)) from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise LeaseUnavailableError(f"{type(error).__name__}: {error}") from None
