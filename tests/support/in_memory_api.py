"""An in-memory Kubernetes API server behind the operator's own client, for the unit tier.

`InMemoryApiServer` stands where `KubeClient` hands its requests over (the connection pool, whose
other-than-plain path the client already takes for a proxy), so every line of the client runs as against
a cluster. It answers with the behaviour the operator relies on and nothing more, each part of it a case
of `tests.support.api_contract`, which the cluster tier runs against the real API server:

- objects by apiVersion, kind, namespace and name; lists narrowed by equality label selectors; discovery;
- one resourceVersion counter, a write that changes nothing makes no version (nor watch event);
  `metadata.generation` where the operator reads it: a custom resource's (a MultimodalDeployment, a
  LeaderWorkerSet) grows with anything but its metadata and status, a Deployment's with its spec or
  annotations;
- server-side apply per field manager, with force: a field the manager applied before and no longer
  applies is removed unless another manager holds it; a field applied moves to its applier; owner
  references are kept per uid, every other list as a whole; the status subresource apart from the rest,
  which never changes it;
- JSON merge patches (a `metadata.resourceVersion` in one is a precondition: 409 when stale) and JSON
  patches (`add`: 422 where its path is missing), each an Update of its field manager taking the fields
  it changed;
- POST (409 when the name is taken), 404 for what does not exist, 422 for a changed Job template;
- DELETE with a uid precondition (409), and the garbage collector's work done at once where the real
  one does it a moment later: an object none of whose owners exists is deleted, a reference to an owner
  that is gone is removed from an object that has others;
- the watch event each change brings (`events`), for tests to feed the operator's cache and controller.

A request the operator does not make (another patch type, a set-based selector, an apply without force)
fails the test loudly (NotImplementedError) rather than being answered by a guess. The pod log a kubelet
would serve is whatever a test put in `pod_logs`. Test hooks: `before` runs an action before a matching
request (another writer's change between a read and a write), `refuse` answers one with an error.
Imports the operator's client and kinds table, and the field paths of `field_paths`.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import urllib3
from kubernetes import client as k8s

from mmd_operator.kube.client import USER_AGENT, KubeClient
from mmd_operator.vocabulary import kinds
from mmd_operator.vocabulary.kinds import ApiKind
from tests.support.field_paths import (
    SYSTEM,
    Path,
    equality_selector,
    fields_v1,
    leaves,
    merge_patched,
    overlaps,
    remove_field,
    set_field,
)

Entry = tuple[str, str, str]  # field manager, operation (Apply or Update), subresource
ObjectId = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" when cluster-scoped), name

_BY_PLURAL = {(kind.api_version, kind.plural): kind for kind in kinds.ALL}
_CLUSTER_SCOPED = {kinds.NODE, kinds.STORAGE_CLASS, kinds.NAMESPACE, kinds.RESOURCE_SLICE, kinds.DEVICE_CLASS}
_WITHOUT_STATUS = {
    kinds.CONFIGMAP,
    kinds.SECRET,
    kinds.EVENT,
    kinds.CONTROLLER_REVISION,
    kinds.LEASE,
    kinds.STORAGE_CLASS,
    kinds.RESOURCE_CLAIM_TEMPLATE,
    kinds.RESOURCE_SLICE,
    kinds.DEVICE_CLASS,
}
# Custom resources: the generation counts every change outside metadata and status.
_CUSTOM = {kinds.MULTIMODAL_DEPLOYMENT, kinds.LEADER_WORKER_SET}
_GARBAGE_COLLECTOR = "generic-garbage-collector"


@dataclass(frozen=True)
class Request:
    """One request as the client sent it."""

    method: str
    path: str
    query: Mapping[str, str]
    content_type: str
    body: Any
    agent: str


@dataclass(frozen=True)
class WatchEvent:
    """What a watch of `kind` would deliver for one change."""

    type: str
    kind: ApiKind
    object: dict[str, Any]


class RefusalError(Exception):
    """An answer with an error status, as the API server words it."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code, self.reason, self.message = code, reason, message

    def body(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


@dataclass
class _Hook:
    matches: Callable[[Request], bool]
    action: Callable[[Request], None]
    times: int


@dataclass
class InMemoryApiServer:
    """The objects, their field managers, the watch events and the requests of one in-memory cluster."""

    served: frozenset[ApiKind] = frozenset(kinds.ALL)
    events: list[WatchEvent] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    # What `GET .../pods/<name>/log` answers: the kubelet's part, set by a test.
    pod_logs: dict[tuple[str, str], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._objects: dict[ObjectId, dict[str, Any]] = {}
        self._fields: dict[ObjectId, dict[Entry, set[Path]]] = {}
        self._versions = itertools.count(1000)
        self._hooks: list[_Hook] = []

    # -- what tests use ---------------------------------------------------------------------------

    def client(self, field_manager: str = "mmd-operator", *, agent: str = USER_AGENT) -> KubeClient:
        """The operator's client, under `field_manager`, talking to this server."""
        configuration = k8s.Configuration()
        configuration.host = "http://in-memory"
        api_client = k8s.ApiClient(configuration)
        api_client.rest_client.pool_manager = self
        return KubeClient(api_client, field_manager=field_manager, agent=agent)

    def get(self, kind: ApiKind, namespace: str, name: str) -> dict[str, Any] | None:
        """An object as a GET would return it, or None."""
        with self._lock:
            oid = (kind.api_version, kind.kind, namespace, name)
            return self._out(oid) if oid in self._objects else None

    def all(self, kind: ApiKind, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every object of `kind` (in `namespace`)."""
        with self._lock:
            return [
                self._out(oid)
                for oid in sorted(self._objects)
                if oid[:2] == (kind.api_version, kind.kind) and namespace in (None, oid[2])
            ]

    def writes(self) -> list[Request]:
        """Every request sent so far that was not a read."""
        return [request for request in self.requests if request.method != "GET"]

    def watch(self, kind: ApiKind, namespace: str, after: str) -> Iterator[WatchEvent]:
        """The events of `kind` in `namespace` that a watch from resourceVersion `after` delivers."""
        for event in list(self.events):
            metadata = event.object["metadata"]
            if (
                event.kind == kind
                and metadata.get("namespace", "") == namespace
                and int(metadata["resourceVersion"]) > int(after)
            ):
                yield event

    def before(
        self, matches: Callable[[Request], bool], action: Callable[[Request], None], *, times: int = 1
    ) -> None:
        """Run `action` before answering each of the next `times` requests that `matches`."""
        self._hooks.append(_Hook(matches, action, times))

    def refuse(
        self, matches: Callable[[Request], bool], code: int, reason: str, message: str, *, times: int = 1
    ) -> None:
        """Answer the next `times` requests that `matches` with an error."""

        def answer(_: Request) -> None:
            raise RefusalError(code, reason, message)

        self.before(matches, answer, times=times)

    # -- the connection pool's side (what KubeClient calls) ----------------------------------------

    def urlopen(
        self,
        method: str,
        url: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        **_: Any,
    ) -> urllib3.HTTPResponse:
        """Answer one request of the client."""
        parts = urlsplit(url)
        headers = headers or {}
        request = Request(
            method=method,
            path=parts.path,
            query=dict(parse_qsl(parts.query)),
            content_type=headers.get("Content-Type", ""),
            body=json.loads(body) if body else None,
            agent=headers.get("User-Agent", ""),
        )
        self.requests.append(request)
        with self._lock:  # the actions run outside the lock: one may wait for another thread's request
            due = [hook for hook in self._hooks if hook.matches(request)]
            for hook in due:
                hook.times -= 1
            self._hooks = [hook for hook in self._hooks if hook.times > 0]
        try:
            for hook in due:
                hook.action(request)
            with self._lock:
                code, answer = self._answer(request)
        except RefusalError as refusal:
            code, answer = refusal.code, refusal.body()
        data = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
        return urllib3.HTTPResponse(
            body=data, status=code, reason=_REASONS.get(code, ""), preload_content=True
        )

    def clear(self) -> None:
        """The pool manager's clean-up: nothing to release."""

    # -- routing ---------------------------------------------------------------------------------

    def _answer(self, request: Request) -> tuple[int, Any]:
        segments = [part for part in request.path.split("/") if part]
        if segments[:1] == ["api"]:
            api_version, rest = segments[1], segments[2:]
        elif segments[:1] == ["apis"]:
            api_version, rest = "/".join(segments[1:3]), segments[3:]
        else:
            raise NotImplementedError(f"the in-memory API server does not serve {request.path}")
        if not rest and request.method == "GET":
            return 200, self._discovery(api_version)
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        kind = _BY_PLURAL.get((api_version, rest[0]))
        if kind is None or kind not in self.served:
            raise RefusalError(
                404, "NotFound", f"the server could not find the requested resource ({request.path})"
            )
        name, subresource = [*rest[1:], "", ""][:2]
        oid = (kind.api_version, kind.kind, namespace, name)
        manager = request.query.get("fieldManager") or request.agent.split("/")[0]
        match request.method, bool(name), request.content_type:
            case "GET", False, _:
                return 200, self._list(kind, namespace, request.query.get("labelSelector", ""))
            case "GET", True, _ if subresource == "log":
                return 200, self._log(oid, int(request.query.get("tailLines", 0) or 0))
            case "GET", True, _ if not subresource:
                return 200, self._read(oid)
            case "POST", False, _:
                return 201, self._create(kind, namespace, manager, request.body)
            case "PATCH", True, "application/apply-patch+yaml":
                if request.query.get("force") != "true":
                    raise NotImplementedError("the operator always applies with force")
                return 200, self._apply(kind, oid, manager, request.body, subresource)
            case "PATCH", True, "application/merge-patch+json" if not subresource:
                return 200, self._merge(kind, oid, manager, request.body)
            case "PATCH", True, "application/json-patch+json" if not subresource:
                return 200, self._json_patch(kind, oid, manager, request.body)
            case "DELETE", True, _ if not subresource:
                return 200, self._delete(oid, request.body or {})
        raise NotImplementedError(
            f"the in-memory API server does not implement {request.method} {request.path}"
        )

    def _discovery(self, api_version: str) -> dict[str, Any]:
        served = [kind for kind in self.served if kind.api_version == api_version]
        if not served:
            raise RefusalError(
                404, "NotFound", f"the server could not find the requested resource ({api_version})"
            )
        resources = [
            {"name": kind.plural, "kind": kind.kind, "namespaced": kind not in _CLUSTER_SCOPED}
            for kind in sorted(served, key=lambda k: k.plural)
        ]
        return {"kind": "APIResourceList", "groupVersion": api_version, "resources": resources}

    # -- reads -------------------------------------------------------------------------------------

    def _read(self, oid: ObjectId) -> dict[str, Any]:
        if oid not in self._objects:
            raise RefusalError(404, "NotFound", f'{_kind_of(oid).plural} "{oid[3]}" not found')
        return self._out(oid)

    def _list(self, kind: ApiKind, namespace: str, selector: str) -> dict[str, Any]:
        wanted = equality_selector(selector)
        items = [
            self._out(oid)
            for oid in sorted(self._objects)
            if oid[:2] == (kind.api_version, kind.kind)
            and (not namespace or oid[2] == namespace)
            and all(
                (self._objects[oid]["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items()
            )
        ]
        return {"kind": f"{kind.kind}List", "metadata": {"resourceVersion": self._latest()}, "items": items}

    def _log(self, oid: ObjectId, lines: int) -> str:
        self._read(oid)
        text = self.pod_logs.get((oid[2], oid[3]), "")
        return "".join(text.splitlines(keepends=True)[-lines:]) if lines else text

    def _latest(self) -> str:
        versions = [int(obj["metadata"]["resourceVersion"]) for obj in self._objects.values()]
        return str(max(versions, default=0))

    # -- writes ------------------------------------------------------------------------------------

    def _create(self, kind: ApiKind, namespace: str, manager: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        oid = (kind.api_version, kind.kind, namespace, name)
        if oid in self._objects:
            raise RefusalError(409, "AlreadyExists", f'{kind.plural} "{name}" already exists')
        created = {
            **_within(kind, _without_system(body), ""),
            "apiVersion": kind.api_version,
            "kind": kind.kind,
        }
        created["metadata"] = {**created["metadata"], **_skeleton(kind, oid)["metadata"]}
        return self._update(kind, oid, manager, None, created)

    def _apply(
        self, kind: ApiKind, oid: ObjectId, manager: str, body: dict[str, Any], subresource: str
    ) -> dict[str, Any]:
        if body.get("apiVersion") != kind.api_version or body.get("kind") != kind.kind:
            raise RefusalError(400, "BadRequest", "the apply's apiVersion and kind differ from its URL's")
        before = self._objects.get(oid)
        if before is None and subresource:
            raise RefusalError(404, "NotFound", f'{kind.plural} "{oid[3]}" not found')
        after = copy.deepcopy(before) if before is not None else _skeleton(kind, oid)
        applied = leaves(_within(kind, body, subresource))
        fields = {entry: set(paths) for entry, paths in self._fields.get(oid, {}).items()}
        previous = fields.pop((manager, "Apply", subresource), set())
        held = set().union(*fields.values())
        for path in sorted(previous - applied.keys(), key=len, reverse=True):
            if not any(overlaps(path, other) for other in held):
                remove_field(after, path)
        for path, value in applied.items():
            set_field(after, path, value)
            for paths in fields.values():
                paths.difference_update({owned for owned in paths if overlaps(owned, path)})
        fields[(manager, "Apply", subresource)] = set(applied)
        return self._commit(kind, oid, before, after, fields)

    def _merge(self, kind: ApiKind, oid: ObjectId, manager: str, patch: dict[str, Any]) -> dict[str, Any]:
        before = self._objects.get(oid)
        if before is None:
            raise RefusalError(404, "NotFound", f'{kind.plural} "{oid[3]}" not found')
        patch = copy.deepcopy(patch)
        expected = (patch.get("metadata") or {}).pop("resourceVersion", None)
        if expected is not None and expected != before["metadata"]["resourceVersion"]:
            raise RefusalError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {kind.plural} "{oid[3]}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )
        after = merge_patched(copy.deepcopy(before), _without_system(patch))
        return self._update(kind, oid, manager, before, after)

    def _json_patch(
        self, kind: ApiKind, oid: ObjectId, manager: str, operations: list[dict[str, Any]]
    ) -> dict[str, Any]:
        before = self._objects.get(oid)
        if before is None:
            raise RefusalError(404, "NotFound", f'{kind.plural} "{oid[3]}" not found')
        after = copy.deepcopy(before)
        for operation in operations:
            if operation.get("op") != "add":
                raise NotImplementedError(f"JSON patch operation {operation.get('op')}")
            *parents, last = [
                part.replace("~1", "/").replace("~0", "~") for part in operation["path"][1:].split("/")
            ]
            node: Any = after
            for part in parents:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, list) and last == "-":
                node.append(copy.deepcopy(operation["value"]))
            elif isinstance(node, dict):
                node[last] = copy.deepcopy(operation["value"])
            else:
                raise RefusalError(
                    422, "Invalid", f"add operation does not apply: doc is missing path: {operation['path']}"
                )
        return self._update(kind, oid, manager, before, after)

    def _update(
        self, kind: ApiKind, oid: ObjectId, manager: str, before: dict[str, Any] | None, after: dict[str, Any]
    ) -> dict[str, Any]:
        """A write that is not an apply: its manager takes every field it changed."""
        if before is not None and kind not in _WITHOUT_STATUS:
            after["status"] = copy.deepcopy(before.get("status"))  # only the status subresource changes it
            if after["status"] is None:
                del after["status"]
        old = leaves(_within(kind, before, "")) if before is not None else {}
        new = leaves(_within(kind, after, ""))
        touched = {path for path, value in new.items() if old.get(path, _MISSING) != value} | (
            old.keys() - new.keys()
        )
        fields = {entry: set(paths) for entry, paths in self._fields.get(oid, {}).items()}
        for paths in fields.values():
            paths.difference_update({owned for owned in paths if any(overlaps(owned, t) for t in touched)})
        entry = (manager, "Update", "")
        fields[entry] = fields.get(entry, set()) | (touched & new.keys())
        return self._commit(kind, oid, before, after, fields)

    def _delete(self, oid: ObjectId, options: Mapping[str, Any]) -> dict[str, Any]:
        found = self._objects.get(oid)
        if found is None:
            raise RefusalError(404, "NotFound", f'{_kind_of(oid).plural} "{oid[3]}" not found')
        if options.get("propagationPolicy", "Background") != "Background":
            raise NotImplementedError("the operator deletes in the background only")
        expected = (options.get("preconditions") or {}).get("uid")
        uid = found["metadata"]["uid"]
        if expected and expected != uid:
            raise RefusalError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {expected}, UID in object meta: {uid}",
            )
        gone = self._remove_object(oid)
        self._collect_garbage()
        return gone

    # -- bookkeeping -------------------------------------------------------------------------------

    def _commit(
        self,
        kind: ApiKind,
        oid: ObjectId,
        before: dict[str, Any] | None,
        after: dict[str, Any],
        fields: dict[Entry, set[Path]],
    ) -> dict[str, Any]:
        fields = {entry: paths for entry, paths in fields.items() if paths}
        if before is not None:
            _invalid_change(kind, before, after)
            if after == before and fields == self._fields.get(oid):
                return self._out(oid)
        metadata = after["metadata"]
        if before is None:
            metadata["uid"] = str(uuid.uuid4())
            metadata["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if kind in _CUSTOM or kind == kinds.DEPLOYMENT:
                metadata["generation"] = 1
        elif "generation" in metadata and _spec_changed(kind, before, after):
            metadata["generation"] = int(metadata["generation"]) + 1
        metadata["resourceVersion"] = str(next(self._versions))
        self._objects[oid], self._fields[oid] = after, fields
        self.events.append(WatchEvent("ADDED" if before is None else "MODIFIED", kind, self._out(oid)))
        answer = self._out(oid)
        self._collect_garbage()
        return answer

    def _remove_object(self, oid: ObjectId) -> dict[str, Any]:
        gone = self._out(oid)
        del self._objects[oid]
        self._fields.pop(oid, None)
        gone["metadata"]["resourceVersion"] = str(next(self._versions))
        self.events.append(WatchEvent("DELETED", _kind_of(oid), copy.deepcopy(gone)))
        return gone

    def _collect_garbage(self) -> None:
        """Delete what has lost every owner; unlink the owners that are gone from what has others."""
        changed = True
        while changed:
            changed = False
            uids = {obj["metadata"]["uid"] for obj in self._objects.values()}
            for oid, obj in list(self._objects.items()):
                references = obj["metadata"].get("ownerReferences") or []
                dangling = [ref for ref in references if ref.get("uid") not in uids]
                if not dangling:
                    continue
                changed = True
                if len(dangling) == len(references):
                    self._remove_object(oid)
                    continue
                after = copy.deepcopy(obj)
                after["metadata"]["ownerReferences"] = [ref for ref in references if ref.get("uid") in uids]
                self._update(_kind_of(oid), oid, _GARBAGE_COLLECTOR, obj, after)
                break  # `_update` collected again

    def _out(self, oid: ObjectId) -> dict[str, Any]:
        """The object as the API answers it: with its field managers."""
        answer = copy.deepcopy(self._objects[oid])
        answer["metadata"]["managedFields"] = [
            {
                "manager": manager,
                "operation": operation,
                "apiVersion": oid[0],
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_v1(paths),
                **({"subresource": subresource} if subresource else {}),
            }
            for (manager, operation, subresource), paths in sorted(self._fields.get(oid, {}).items())
        ]
        return answer


_REASONS = {
    200: "OK",
    201: "Created",
    400: "Bad Request",
    404: "Not Found",
    409: "Conflict",
    422: "Unprocessable Entity",
}
_MISSING = object()


def _kind_of(oid: ObjectId) -> ApiKind:
    return next(kind for kind in kinds.ALL if (kind.api_version, kind.kind) == oid[:2])


def _skeleton(kind: ApiKind, oid: ObjectId) -> dict[str, Any]:
    metadata = {"name": oid[3], **({"namespace": oid[2]} if oid[2] else {})}
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": metadata}


def _without_system(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` without what the server sets (a write's own values of them are not taken)."""
    out = copy.deepcopy(dict(obj))
    metadata = {
        k: v for k, v in (out.get("metadata") or {}).items() if k not in SYSTEM - {"name", "namespace"}
    }
    out["metadata"] = metadata
    return out


def _within(kind: ApiKind, obj: Mapping[str, Any] | None, subresource: str) -> dict[str, Any]:
    """What a write to the main resource or to `subresource` may change of `obj`."""
    if obj is None:
        return {}
    if subresource == "status":
        return {"status": copy.deepcopy(obj["status"])} if "status" in obj else {}
    if subresource:
        raise NotImplementedError(f"subresource {subresource}")
    return {k: copy.deepcopy(v) for k, v in obj.items() if k != "status" or kind in _WITHOUT_STATUS}


def _spec_changed(kind: ApiKind, before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    if kind == kinds.DEPLOYMENT:
        annotations = [(obj["metadata"].get("annotations") or {}) for obj in (before, after)]
        return before.get("spec") != after.get("spec") or annotations[0] != annotations[1]

    def rest(obj: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in obj.items() if k not in ("metadata", "status")}

    return rest(before) != rest(after)


def _invalid_change(kind: ApiKind, before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    """422 for a change the API server refuses, of what the operator writes: a Job's template."""
    if kind == kinds.JOB and (before.get("spec") or {}).get("template") != (after.get("spec") or {}).get(
        "template"
    ):
        raise RefusalError(
            422,
            "Invalid",
            f'Job.batch "{before["metadata"]["name"]}" is invalid: spec.template: Invalid value: '
            "field is immutable",
        )
