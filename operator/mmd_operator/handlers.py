"""kopf's part: settings, start-up, clean-up, the liveness probe and the watch streams; imports kopf.

One of the two modules that import kopf.

The operator watches MultimodalDeployments and the children it labels (Jobs and pods of builds, the
serving Deployment and its pods, Services, ConfigMaps, NetworkPolicies, the HorizontalPodAutoscaler and
PodDisruptionBudget of serving) plus engine-cache claims, and hands every event to the controller,
which queues the resources concerned and reconciles them. The streams are kopf's own (its listing,
watch, reconnection after a break or a 410, and its error back-off), but their events go straight to
the controller rather than through kopf's handler machinery: that machinery (a worker per object,
cause detection, a batching window, handler invocation with its loggers and patches) exists for
change-detecting handlers and finalizers, which the operator does not use, and at a thousand resources
it cost more CPU than the operator's own decisions. Nothing is stored in the watched objects, so the
operator writes only what it means to. The resync is the controller's timer. The children's watches
are narrowed server-side to the operator's label.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import types
from collections.abc import Iterator
from typing import Any

import kopf
import kopf._cogs.clients.api as kopf_api
import orjson
from kopf._cogs.clients import watching
from kopf._cogs.structs import references

from mmd_operator.config import OperatorConfig
from mmd_operator.controller import WATCHED, Controller
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import KubeClient, user_agent
from mmd_operator.vocabulary.kinds import ApiKind

_log = logging.getLogger(__name__)
# How often the stream of a kind the cluster does not serve looks again whether it does.
OPTIONAL_KIND_SECONDS = 30.0
# Set by `startup`; the event handlers below only run after it.
_controller: Controller | None = None
_streams: list[asyncio.Task[None]] = []


def controller() -> Controller:
    """The running controller."""
    if _controller is None:
        raise RuntimeError("the operator has not started")
    return _controller


class RetryForever:
    """Delays between attempts of one API request that never run out: 1, 2, 4, 8, then every 10 s.

    kopf's own list ends after eight retries and then fails the request; for a watch that means the
    watcher, and with it the whole operator, stops. A long enough outage spends those retries on refused
    connections (which kopf forgives), and one answer from a half-started API server at the last attempt
    ("before all known HTTP paths have been installed", 503) or a minute of 403s while a binding is being
    restored then ended the operator. The 30-minute soak found it. A watch must outlast any outage.
    """

    def __init__(self, first: float = 1.0, longest: float = 10.0) -> None:
        self.first = first
        self.longest = longest

    def __iter__(self) -> Iterator[float]:
        delay = self.first
        while True:
            yield delay
            delay = min(self.longest, delay * 2)


def parse_watch_events_with_orjson() -> None:
    """Have kopf's watch streams parse each event with orjson instead of the standard library's json.

    Parsing watch events was the largest single cost of the operator's CPU (a pod's event is several
    KiB); orjson takes about a third of the time for the same dicts. kopf has no setting for it: its
    stream module's `json` (used for nothing else) is replaced; if kopf ever parses elsewhere, this
    changes nothing and the operator still works.
    """
    if getattr(kopf_api, "json", None) is not None:
        kopf_api.json = types.SimpleNamespace(loads=orjson.loads)  # type: ignore[attr-defined,assignment]


def configure(settings: kopf.OperatorSettings, config: OperatorConfig) -> None:
    """Kopf settings for a write-free, server-side-filtered operator."""
    parse_watch_events_with_orjson()
    settings.posting.enabled = False  # events are the operator's own, about phase changes only
    settings.peering.standalone = True
    # No watch on CustomResourceDefinitions (which would need a cluster-wide role): kopf discovers the
    # resources once, after `startup`, which waits for the CRD.
    settings.scanning.disabled = True
    # Listings by GET, whose items come as events of type None: `stream` tells a listing's items by it.
    settings.watching.initial_streaming = False
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    settings.networking.error_backoffs = RetryForever()
    for kind, selector in WATCHED:
        if selector is not None:
            settings.watching.label_selectors[_selector_key(kind.api)] = selector


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Configure kopf, then start the controller (it lists everything once before reconciling)."""
    global _controller
    config: OperatorConfig = memo.get("config") or OperatorConfig.from_env()
    configure(settings, config)
    client = KubeClient.from_environment(
        field_manager=config.field_manager,
        agent=memo.get("agent") or user_agent(),
        writes_allowed=memo.get("writes_allowed"),  # the leader election's guard, if elected
    )
    _controller = Controller(client, config)
    await _controller.start()
    # What start-up made (modules, compiled rules and templates, the first listing) lives as long as
    # the process: the cycle collector need not walk it again at every full collection. Start-up's
    # garbage goes first, so none of it is kept for good.
    gc.collect()
    gc.freeze()
    start_streams(settings, _controller, config)
    _log.info("Operator started: %d workers, resync every %.0f s", config.workers, config.resync_seconds)


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    """Stop the workers and release the API client."""
    await stop_streams()
    if _controller is not None:
        await _controller.stop()


@kopf.on.probe(id="reconcile_queue")
def queue_length(**_: Any) -> int:
    """For the liveness endpoint: how many resources wait to be reconciled."""
    return len(controller().queue)


def _selector_key(api: ApiKind) -> tuple[str, str, str] | tuple[str, str]:
    """How kopf's settings name a kind: (group, version, plural), the core group without its empty name."""
    return (api.group, api.version, api.plural) if api.group else (api.version, api.plural)


def _watched_resource(kind: cached.CachedKind) -> references.Resource:
    api = kind.api
    return references.Resource(api.group, api.version, api.plural, kind=kind.kind, namespaced=True)


async def stream(
    settings: kopf.OperatorSettings, running: Controller, kind: cached.CachedKind, namespace: str | None
) -> None:
    """Feed every event of one kind (in `namespace`, or everywhere) to `running`, for as long as it runs.

    kopf's stream lists first (events of type None), then watches from the listing's version and
    lists again after a break; at the end of each listing the controller forgets what it did not
    list. The stream only ends on an error it does not retry; then, after its back-off, this starts
    it again.
    """
    resource = _watched_resource(kind)
    where = references.NamespaceName(namespace) if namespace else None
    feed = running.on_resource if kind is cached.RESOURCES else functools.partial(running.on_child, kind)
    while True:
        if kind.optional and not await running.served(kind):
            # Not served (its CRD is not installed): look again later, quietly.
            await asyncio.sleep(OPTIONAL_KIND_SECONDS)
            continue
        before: set[tuple[str, str]] | None = None  # what the cache held as a listing began
        listed: set[tuple[str, str]] = set()
        try:
            async for event in watching.infinite_watch(settings=settings, resource=resource, namespace=where):
                if event is watching.Bookmark.LISTED:
                    running.listed(
                        kind, running.cached_keys(kind, namespace) if before is None else before, listed
                    )
                    before, listed = None, set()
                    continue
                if isinstance(event, watching.Bookmark) or event.get("type") == "BOOKMARK":
                    continue
                if event.get("type") is None:  # an item of a listing
                    if before is None:
                        before = running.cached_keys(kind, namespace)
                    metadata = event["object"].get("metadata", {})
                    listed.add((str(metadata.get("namespace", "")), str(metadata.get("name", ""))))
                feed(event.get("type"), event["object"])
        except asyncio.CancelledError:
            raise
        except Exception:
            _log.exception("The watch of %s stopped; starting it again", kind.api.plural)
        await asyncio.sleep(settings.watching.reconnect_backoff or 1.0)


def start_streams(settings: kopf.OperatorSettings, running: Controller, config: OperatorConfig) -> None:
    """One stream per watched kind and namespace, feeding `running`."""
    for kind, _ in WATCHED:
        for namespace in config.namespaces or (None,):
            _streams.append(
                asyncio.create_task(
                    stream(settings, running, kind, namespace),
                    name=f"watch {kind.api.plural} {namespace or '*'}",
                )
            )


async def stop_streams() -> None:
    """Cancel the streams."""
    for task in _streams:
        task.cancel()
    await asyncio.gather(*_streams, return_exceptions=True)
    _streams.clear()
