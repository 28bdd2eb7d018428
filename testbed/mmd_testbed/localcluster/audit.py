"""The local API server's audit log of write requests (and of workloads' reads): its policy, reading it.

kube-apiserver writes one JSON event per line to `logs/audit.log` for every create, update, patch, delete
and deletecollection, at level Metadata (who, which verb, which object, the response code; no bodies)
and only once the response is complete. What is not ours and never stops is left out: node heartbeats
and the control plane's own leases (in kube-node-lease and kube-system), the pod status that kwok writes
on every transition, and events. Leases elsewhere are logged: the operator's leader election is counted.
Reads (get, list, watch) are logged only for ServiceAccounts, the identity an operator runs under in a
cluster, so the benchmark can count the reads of an operator started with its ServiceAccount's token,
while the control plane's own readers stay out of the log. Tests count the operator's requests with
`write_requests` and `requests`, telling its clients apart by user agent (`mmd-operator/<version>` for
its own client, followed by ` (<identity>)` with leader election, and `kopf/<version>` for kopf's).

Imports: the standard library and PyYAML.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
READ_VERBS = ("get", "list", "watch")
# Rotate at this many MB, keeping this many old files next to the log (audit-<time>.log).
MAX_SIZE_MB = 100
MAX_BACKUPS = 2

# Written often by kwok, the controllers and the API server itself, and never by the operator.
_NOISE = [
    {"group": "", "resources": ["nodes", "nodes/status", "pods/status", "events"]},
    {"group": "events.k8s.io", "resources": ["events"]},
]
# Node heartbeats (kube-node-lease) and the API server's identity leases (kube-system).
_CONTROL_PLANE_LEASES = {
    "level": "None",
    "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}],
    "namespaces": ["kube-node-lease", "kube-system"],
}


def audit_policy() -> dict[str, Any]:
    """Return the audit policy: writes (and ServiceAccounts' reads) at level Metadata, without the noise."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        # The first matching rule decides; requests no rule matches are not logged.
        "rules": [
            {"level": "None", "resources": _NOISE},
            _CONTROL_PLANE_LEASES,
            {"level": "Metadata", "verbs": list(WRITE_VERBS)},
            {"level": "Metadata", "verbs": list(READ_VERBS), "userGroups": ["system:serviceaccounts"]},
            {"level": "None"},
        ],
    }


def write_audit_policy(path: Path) -> None:
    """Write the policy file for `--audit-policy-file`."""
    path.write_text(yaml.safe_dump(audit_policy(), sort_keys=False))


def audit_flags(policy: Path, log: Path) -> list[str]:
    """Return the kube-apiserver flags that write the audit log `log` under `policy`."""
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={log}",
        "--audit-log-format=json",
        f"--audit-log-maxsize={MAX_SIZE_MB}",
        f"--audit-log-maxbackup={MAX_BACKUPS}",
    ]


def _log_files(audit_log: Path) -> list[Path]:
    # Rotated files are named <stem>-<UTC timestamp><suffix>, so name order is age order.
    rotated = sorted(audit_log.parent.glob(f"{audit_log.stem}-*{audit_log.suffix}"))
    return [*rotated, audit_log]


def _timestamp(event: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(event["stageTimestamp"]))
    except (KeyError, ValueError):
        return None


def write_requests(
    audit_log: Path, *, user_agent_prefixes: tuple[str, ...], since: datetime | None = None
) -> list[dict[str, Any]]:
    """Return the audit events of write requests whose user agent starts with one of `user_agent_prefixes`.

    `since` (a naive datetime is local time) keeps those completed at or after it. See `requests`.
    """
    return requests(audit_log, user_agent_prefixes=user_agent_prefixes, since=since, verbs=WRITE_VERBS)


def requests(
    audit_log: Path,
    *,
    user_agent_prefixes: tuple[str, ...],
    since: datetime | None = None,
    verbs: tuple[str, ...] = WRITE_VERBS + READ_VERBS,
    username: str | None = None,
) -> list[dict[str, Any]]:
    """Return the audit events of requests with one of `verbs` whose user agent has one of the prefixes.

    Reads `audit_log` and the files it was rotated into, oldest first. Only completed requests are in
    the log (see the policy; a watch is logged when it ends); `since` keeps those completed at or after
    it, `username` those of one user. The API server writes an event just after the response, so a
    caller that has just made a request may have to look again. A line being written while we read is
    skipped.
    """
    cutoff = since.astimezone(UTC) if since is not None else None
    events: list[dict[str, Any]] = []
    for path in _log_files(audit_log):
        try:
            lines = path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            if username is not None and username not in line:
                continue  # the log is large after a benchmark; most lines need no parsing
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if (
                not isinstance(event, dict)
                or event.get("verb") not in verbs
                or not str(event.get("userAgent", "")).startswith(user_agent_prefixes)
                or (username is not None and (event.get("user") or {}).get("username") != username)
            ):
                continue
            if cutoff is not None:
                completed = _timestamp(event)
                if completed is None or completed < cutoff:
                    continue
            events.append(event)
    return events
