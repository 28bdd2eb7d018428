"""The kopf handlers: thin, and write-free. One of the two modules that import kopf.

kopf watches MultimodalDeployments and the children the operator labels (Jobs and pods of builds, the
serving Deployment and its pods, Services, ConfigMaps, NetworkPolicies, the HorizontalPodAutoscaler and
PodDisruptionBudget of serving) plus engine-cache claims, and
hands every event to the controller, which queues the resources concerned and reconciles them. Only
`on.event` handlers are used: they see creations, changes, deletions and, at start-up, every existing
object (the resume), and unlike kopf's change-detecting handlers they store nothing in the objects, so
the operator writes only what it means to. The resync is the controller's timer. The children's
watches are narrowed server-side to the operator's label.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Iterable, Iterator
from typing import Any

import kopf
import kopf._cogs.clients.api as kopf_api
import orjson

from mmd_operator.api.v1alpha1 import GROUP, PLURAL, VERSION
from mmd_operator.config import OperatorConfig
from mmd_operator.controller import WATCHED, Controller
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import KubeClient, user_agent
from mmd_operator.vocabulary.kinds import ApiKind

_log = logging.getLogger(__name__)
# Set by `startup`; the event handlers below only run after it.
_controller: Controller | None = None


def controller() -> Controller:
    """The running controller."""
    if _controller is None:
        raise RuntimeError("the operator has not started")
    return _controller


class _NoDiffBase(kopf.DiffBaseStorage):
    """No last-handled copy of each object: only change-detecting handlers compare with one.

    kopf builds that copy (a deep copy of the object, less its system fields) on every watch event to
    diff it with the stored one; with `on.event` handlers alone nothing reads the diff, and at a
    thousand resources the copying was the largest part of the operator's CPU time.
    """

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[kopf.FieldSpec] | None = None
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


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
    settings.persistence.diffbase_storage = _NoDiffBase()
    settings.peering.standalone = True
    # No watch on CustomResourceDefinitions (which would need a cluster-wide role): kopf discovers the
    # resources once, after `startup`, which waits for the CRD.
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    settings.networking.error_backoffs = RetryForever()
    settings.execution.max_workers = 4
    # kopf runs one asyncio worker per object with events, kept for `idle_timeout` after the last one.
    # The handlers only hand events over, so a worker can go at once: with the default 5 s, a burst of
    # a thousand resources kept one alive for nearly every object, the operator's memory peak. (A
    # limit on their number instead held back the watch streams while idle workers waited to exit.)
    settings.queueing.idle_timeout = 0.05
    for kind, selector in WATCHED:
        if selector is not None and kind is not cached.RESOURCES:
            settings.watching.label_selectors[_kopf_resource(kind.api)] = selector


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
    _log.info("Operator started: %d workers, resync every %.0f s", config.workers, config.resync_seconds)


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    """Stop the workers and release the API client."""
    if _controller is not None:
        await _controller.stop()


@kopf.on.probe(id="reconcile_queue")
def queue_length(**_: Any) -> int:
    """For the liveness endpoint: how many resources wait to be reconciled."""
    return len(controller().queue)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def resource_event(event: kopf.RawEvent, **_: Any) -> None:
    """A MultimodalDeployment was created, changed, deleted or seen at start-up."""
    controller().on_resource(event.get("type"), event["object"])


def _kopf_resource(api: ApiKind) -> tuple[str, str, str] | tuple[str, str]:
    """How kopf names a kind: (group, version, plural), the core group without its empty name."""
    return (api.group, api.version, api.plural) if api.group else (api.version, api.plural)


def _child_handler(kind: cached.CachedKind) -> None:
    resource = _kopf_resource(kind.api)

    async def child_event(event: kopf.RawEvent, **_: Any) -> None:
        controller().on_child(kind, event.get("type"), event["object"])

    child_event.__doc__ = f"A {kind.kind} the operator watches changed."
    kopf.on.event(*resource, id=f"{kind.api.plural}_event")(child_event)


for _kind in (
    cached.JOBS,
    cached.PODS,
    cached.DEPLOYMENTS,
    cached.SERVICES,
    cached.CONFIGMAPS,
    cached.CLAIMS,
    cached.NETWORK_POLICIES,
    cached.AUTOSCALERS,
    cached.DISRUPTION_BUDGETS,
):
    _child_handler(_kind)
