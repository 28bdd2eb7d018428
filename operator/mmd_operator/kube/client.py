"""The operator's requests to the API server: server-side apply, precondition patches, deletes, events.

A thin layer over the kubernetes client's REST transport (its authentication, TLS and connection pool)
that speaks plain dicts, so what the pure layers build is sent as it is and what comes back is stored as
it is. Every request carries the operator's user agent (with the process's identity, so the audit log
tells two replicas apart) and every write its one field manager (a second only hands a Deployment's
`replicas` over to its autoscaler). A client may be given a guard that refuses every write while it is
false: leader election closes it the moment the lease may be lost, so a leader cut off from the API
server writes nothing more even while its process is still exiting.
Imports the kubernetes client.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from mmd_operator import __version__, metrics
from mmd_operator.vocabulary import kinds
from mmd_operator.vocabulary.kinds import ApiKind

USER_AGENT = f"mmd-operator/{__version__}"
REQUEST_TIMEOUT = 30.0
# How long an answer of API discovery holds: a CRD installed meanwhile is seen within this.
DISCOVERY_SECONDS = 30.0
TOKEN_RECHECK_SECONDS = 10.0
_log = logging.getLogger(__name__)

# Where each kind the operator touches lives in the API.
_RESOURCES: Mapping[tuple[str, str], str] = {(k.api_version, k.kind): k.plural for k in kinds.ALL}


class ApiError(Exception):
    """The API server refused a request; `status` is its HTTP code."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        """404: the object does not exist."""
        return self.status == 404

    @property
    def namespace_terminating(self) -> bool:
        """403: nothing new may be created in a namespace that is being deleted."""
        return self.status == 403 and "being terminated" in self.message

    @property
    def conflict(self) -> bool:
        """409: a precondition failed, or the object exists."""
        return self.status == 409


def path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    """The URL path of a kind (and object) in a namespace."""
    resource = _RESOURCES[(api_version, kind)]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    scoped = f"{base}/namespaces/{namespace}/{resource}" if namespace else f"{base}/{resource}"
    return f"{scoped}/{name}" if name else scoped


class KubeconfigError(Exception):
    """A kubeconfig that cannot be read, or that names no such context."""


class NotLeadingError(Exception):
    """A write refused before it was sent: this process is not (or may no longer be) the leader."""


def user_agent(identity: str | None = None) -> str:
    """The operator's user agent; with `identity` (the leader election's), `mmd-operator/<v> (<identity>)`."""
    return f"{USER_AGENT} ({identity})" if identity else USER_AGENT


class KubeClient:
    """Plain-dict requests to one API server, under one field manager."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        field_manager: str,
        agent: str = USER_AGENT,
        writes_allowed: Callable[[], bool] | None = None,
    ) -> None:
        api_client.user_agent = agent
        self._api = api_client
        self.field_manager = field_manager
        self.agent = agent
        self._writes_allowed = writes_allowed
        self._token: str | None = None
        self._token_until = 0.0
        self._pool: urllib3.HTTPConnectionPool | None = None
        self._prefix = ""
        # What API discovery last said of a kind, and when: {(apiVersion, plural): (served, monotonic)}.
        self._served: dict[tuple[str, str], tuple[bool, float]] = {}

    @classmethod
    def from_environment(
        cls,
        *,
        field_manager: str,
        agent: str = USER_AGENT,
        writes_allowed: Callable[[], bool] | None = None,
        retries: int | None = None,
    ) -> KubeClient:
        """A client for the in-cluster service account, else the current kubeconfig context.

        `retries`: how often the connection pool tries a request again by itself (urllib3's default when
        None); leader election wants none, so that its deadline is its own.
        """
        configuration = k8s.Configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except k8s_config.ConfigException:
            k8s_config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        if retries is not None:
            configuration.retries = retries
        return cls(
            k8s.ApiClient(configuration),
            field_manager=field_manager,
            agent=agent,
            writes_allowed=writes_allowed,
        )

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | None = None,
        *,
        context: str | None = None,
        field_manager: str,
        retries: int | None = None,
    ) -> KubeClient:
        """A client for a kubeconfig (`path`, else $KUBECONFIG or ~/.kube/config) and its `context`.

        `retries` as in `from_environment`.

        Raises:
            KubeconfigError: when the kubeconfig cannot be read or names no such context.
        """
        configuration = k8s.Configuration()
        try:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, context=context, client_configuration=configuration
            )
        except (OSError, ConfigException) as error:
            raise KubeconfigError(str(error)) from error
        if retries is not None:
            configuration.retries = retries
        return cls(k8s.ApiClient(configuration), field_manager=field_manager)

    @property
    def server(self) -> str:
        """The API server's URL."""
        return str(self._api.configuration.host)

    @staticmethod
    def kubeconfig_namespace(path: str | None = None, *, context: str | None = None) -> str:
        """The namespace a kubeconfig's context (`context`, else the current one) names; else `default`.

        Raises:
            KubeconfigError: when the kubeconfig cannot be read.
        """
        try:
            contexts, current = k8s_config.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
        except (OSError, ConfigException) as error:
            raise KubeconfigError(str(error)) from error
        chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
        return str(((chosen or {}).get("context") or {}).get("namespace") or "default")

    def _authorization(self) -> str | None:
        """The bearer token, if the configuration has one, asked of the client every 10 s at most.

        The client's hook re-reads a rotating token (a projected ServiceAccount token, a kubeconfig's
        expiring one); asked at every request, it re-applied the whole kubeconfig each time.
        """
        now = time.monotonic()
        if now >= self._token_until:
            self._token = self._api.configuration.get_api_key_with_prefix(
                "BearerToken", alias="authorization"
            )
            self._token_until = now + TOKEN_RECHECK_SECONDS
        return self._token

    def _send(self, method: str, target: str, **options: Any) -> urllib3.BaseHTTPResponse:
        """Send a request for `target` (a path with its query) to the API server's connection pool.

        The pool is looked up once, not per request: through the pool manager, which parses the whole URL
        and looks its pool up by key each time, a request took 0.71 ms of the operator's CPU at N = 300;
        straight to the pool, 0.58 ms. A proxy keeps the manager's own path (it needs the whole URL).
        """
        host = self._api.configuration.host
        manager = self._api.rest_client.pool_manager
        if type(manager) is not urllib3.PoolManager:
            return manager.urlopen(method, host + target, **options)
        if self._pool is None:
            self._pool = manager.connection_from_url(host)
            self._prefix = (urllib3.util.parse_url(host).path or "").rstrip("/")  # a server behind a path
        return self._pool.urlopen(method, self._prefix + target, redirect=False, **options)

    def close(self) -> None:
        """Release the connection pool."""
        self._api.close()  # type: ignore[no-untyped-call]

    def request(
        self,
        method: str,
        url_path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = REQUEST_TIMEOUT,
    ) -> dict[str, Any]:
        """Send one request (a dict body is sent as JSON) and return the decoded JSON answer.

        Raises:
            ApiError: with the API server's status, reason and message.
            NotLeadingError: for a write while the client's guard is closed; nothing was sent.
        """
        data = self._call(
            method, url_path, query=query, body=body, content_type=content_type, timeout=timeout
        ).data
        answer: dict[str, Any] = orjson.loads(data) if data else {}  # a third of json's time
        return answer

    def _call(
        self,
        method: str,
        url_path: str,
        *,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        timeout: float,
        accept: str = "application/json",
    ) -> urllib3.BaseHTTPResponse:
        if method != "GET" and self._writes_allowed is not None and not self._writes_allowed():
            raise NotLeadingError(f"{method} {url_path} not sent: this operator does not hold the lease")
        metrics.API_REQUESTS.labels(method=method).inc()
        headers = {"Accept": accept, "User-Agent": self.agent}
        if token := self._authorization():
            headers["Authorization"] = token
        payload = None
        if body is not None:
            headers["Content-Type"] = content_type
            payload = orjson.dumps(body)
        target = url_path + (f"?{urlencode(query)}" if query else "")
        try:
            # Straight to the client's connection pool (its TLS, retries and proxy): its generic
            # serialiser walks every value of a body in Python, a tenth of the operator's time at scale.
            response = self._send(
                method, target, body=payload, headers=headers, timeout=urllib3.Timeout(total=timeout)
            )
        except urllib3.exceptions.SSLError as error:
            raise ApiError(0, type(error).__name__, str(error)) from None
        if response.status >= 400:
            raise _api_error(response.status, response.reason, response.data)
        return response

    # -- reads -------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        try:
            return self.request("GET", path(api_version, kind, namespace, name))
        except ApiError as error:
            if error.not_found:
                return None
            raise

    def serves(self, kind: ApiKind, *, within: float = DISCOVERY_SECONDS) -> bool:
        """Whether the API server serves `kind` (its CRD is installed), as discovery said lately.

        Discovery is asked again once its last answer is `within` seconds old.
        """
        key = (kind.api_version, kind.plural)
        known = self._served.get(key)
        if known is not None and time.monotonic() - known[1] < within:
            return known[0]
        prefix = "/api/" if kind.api_version == "v1" else "/apis/"
        try:
            listing = self.request("GET", prefix + kind.api_version)
            served = any(entry.get("name") == kind.plural for entry in listing.get("resources") or [])
        except ApiError as error:
            if not error.not_found:
                raise
            served = False
        self._served[key] = (served, time.monotonic())
        return served

    def pod_log_tail(self, namespace: str, pod: str, *, lines: int, limit_bytes: int) -> str | None:
        """The last `lines` lines of the pod's log (its only container), at most `limit_bytes`.

        None when the pod is gone.
        """
        target = path("v1", "Pod", namespace, pod) + "/log"
        query = {"tailLines": str(lines), "limitBytes": str(limit_bytes)}
        try:
            response = self._call(
                "GET",
                target,
                query=query,
                body=None,
                content_type="",
                timeout=REQUEST_TIMEOUT,
                # The API server negotiates the log's type with its serializers: `text/plain` alone is
                # refused (406), as kubectl's `application/json, */*` is not.
                accept="application/json, */*",
            )
        except ApiError as error:
            if error.not_found:
                return None
            raise
        return response.data.decode("utf-8", "replace")

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Every object of a kind (in `namespace`, or everywhere), optionally by label or field."""
        selectors = {"labelSelector": label_selector, "fieldSelector": field_selector}
        query = {key: value for key, value in selectors.items() if value} or None
        listing = self.request("GET", path(api_version, kind, namespace), query=query)
        items: list[dict[str, Any]] = listing.get("items", [])
        for item in items:  # lists leave these out of their items
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    # -- writes ------------------------------------------------------------------------------

    def apply(
        self, manifest: Mapping[str, Any], *, subresource: str = "", field_manager: str | None = None
    ) -> dict[str, Any]:
        """Server-side apply `manifest` under the field manager, taking over conflicting fields.

        `field_manager` names another manager for this one apply: only the hand-over of a Deployment's
        `replicas` to its autoscaler needs one (`desired.scaling`).
        """
        metadata = manifest["metadata"]
        target = path(manifest["apiVersion"], manifest["kind"], metadata.get("namespace"), metadata["name"])
        return self.request(
            "PATCH",
            target + (f"/{subresource}" if subresource else ""),
            query={"fieldManager": field_manager or self.field_manager, "force": "true"},
            body=dict(manifest),
            content_type="application/apply-patch+yaml",
        )

    def create(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Create the object `manifest` describes (a POST); a 409 ApiError says it exists already."""
        metadata = manifest["metadata"]
        target = path(manifest["apiVersion"], manifest["kind"], metadata.get("namespace"))
        return self.request("POST", target, query={"fieldManager": self.field_manager}, body=dict(manifest))

    def merge_patch(
        self, api_version: str, kind: str, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A JSON merge patch; with `metadata.resourceVersion` in it, only if nobody changed the object."""
        return self.request(
            "PATCH",
            path(api_version, kind, namespace, name),
            query={"fieldManager": self.field_manager},
            body=dict(patch),
            content_type="application/merge-patch+json",
        )

    def json_patch(
        self, api_version: str, kind: str, namespace: str, name: str, operations: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """A JSON patch (RFC 6902): `operations` applied to the object as the API server has it."""
        return self.request(
            "PATCH",
            path(api_version, kind, namespace, name),
            query={"fieldManager": self.field_manager},
            body=[dict(operation) for operation in operations],
            content_type="application/json-patch+json",
        )

    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None
    ) -> bool:
        """Delete an object and what it owns in the background; False when it was already gone."""
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self.request("DELETE", path(api_version, kind, namespace, name), body=body)
        except ApiError as error:
            if error.not_found:
                return False
            raise
        return True

    def post_event(
        self, involved: Mapping[str, Any], *, type: str, reason: str, message: str, component: str
    ) -> None:
        """Record a core/v1 Event about `involved` (a MultimodalDeployment)."""
        metadata = involved["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{metadata['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": metadata["namespace"],
            },
            "involvedObject": {
                "apiVersion": involved["apiVersion"],
                "kind": involved["kind"],
                "name": metadata["name"],
                "namespace": metadata["namespace"],
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "type": type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.request("POST", path("v1", "Event", metadata["namespace"]), body=event)
        except ApiError as error:
            # An event is a courtesy; losing one must not fail a reconcile. In a namespace being deleted
            # it is lost with everything else there: nothing to warn about.
            log = _log.debug if error.namespace_terminating else _log.warning
            log("Could not post event %s on %s: %s", reason, metadata["name"], error)


def _api_error(status: int, reason: str | None, body: bytes | str | None) -> ApiError:
    """The API server's refusal: its status, and the reason and message of its Status answer."""
    reason, message = str(reason or ""), ""
    try:
        answer = json.loads(body or "{}")
        reason = answer.get("reason") or reason
        message = answer.get("message") or ""
    except (ValueError, AttributeError):
        message = (body.decode(errors="replace") if isinstance(body, bytes) else str(body or ""))[:500]
    return ApiError(int(status or 0), reason, message)
