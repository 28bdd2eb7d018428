"""One reconcile of one MultimodalDeployment: plan, observe, judge, decide, write, assess, report.

Level-based and idempotent: whatever triggered it (the resource changed, a child changed, a periodic
resync), a reconcile reads the resource and its children from the cache, derives the checked plan
(memoised per spec), judges the world once (`judgement`), decides what to write from that (`desired`)
and writes only what differs; after writes it observes and judges again, so the status (`status`)
tells what the world looks like after them. A spec the API server admitted but the plan refuses is
reported InvalidSpec with every field path, and nothing is created for it. No kopf here; imports the
layers below it: api, plan, judgement, desired, status, kube, metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from mmd_operator import metrics
from mmd_operator.api.v1alpha1 import (
    API_VERSION,
    KIND,
    MultimodalDeployment,
    MultimodalDeploymentStatus,
    Phase,
)
from mmd_operator.api.validation import InvalidSpecError, name_problem
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import engine_build
from mmd_operator.desired.state import desired_state
from mmd_operator.judgement import judge
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import ApiError, KubeClient
from mmd_operator.kube.engine_index import record_build
from mmd_operator.kube.events import EventRecorder
from mmd_operator.kube.observe import observe
from mmd_operator.kube.writes import WriteCount, Writer
from mmd_operator.plan.resource_plan import ResourcePlan, plan_resource
from mmd_operator.status import Findings, Report, report
from mmd_operator.status.assessment import assess
from mmd_operator.vocabulary import hashing, ownership

_log = logging.getLogger(__name__)
# Plans are derived from the spec alone; this stands in for the name while planning.
PLAN_NAME = "plan"
# How long to wait before reading again a resource whose spec read two ways.
REREAD_SECONDS = 2.0
# How long after a new generation arrives the operator reads it once more (see `_settled_body`).
CONFIRM_SECONDS = 3.0
# What `_settled_body` returns while a resource's spec reads two ways.
_UNSETTLED: Mapping[str, Any] = {"metadata": {}}
Key = tuple[str, str]


@dataclass(frozen=True)
class Outcome:
    """What a reconcile did, and when to look at the resource again without an event."""

    phase: Phase | None
    writes: int
    requeue_after: float | None = None


class Reconciler:
    """Reconciles resources one at a time per resource; safe to call from several worker threads."""

    def __init__(
        self,
        client: KubeClient,
        store: cached.Cache,
        config: OperatorConfig,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.store = store
        self.config = config
        self.writer = Writer(client, store)
        self.events = EventRecorder(client, config.field_manager)
        self.clock = clock
        # Plans by spec digest, kept while some resource has that spec: a plan is ~55 KiB, and with
        # specs changing all day an LRU of them held megabytes for specs nobody had any more (the soak).
        self._plans: dict[str, ResourcePlan | InvalidSpecError] = {}
        self._plan_users: dict[str, set[Key]] = {}
        self._plan_of: dict[Key, str] = {}
        self._plans_lock = threading.Lock()
        # What each resource's current plan uses, so a change of a shared child finds its users.
        self._users: dict[Key, tuple[str, str]] = {}
        self._users_lock = threading.Lock()
        self._phases: dict[Key, Phase | None] = {}
        self._phases_lock = threading.Lock()
        # The spec each resource was last reconciled with, by uid and generation (see `_settled_body`).
        self._specs: dict[Key, tuple[str, int, str]] = {}
        self._reread: set[Key] = set()
        self._confirm: dict[Key, float] = {}
        self._specs_lock = threading.Lock()

    # -- who uses what ---------------------------------------------------------------------------

    def users_of_cache_key(self, namespace: str, cache_key: str) -> list[str]:
        """Resources in `namespace` whose current plan has `cache_key`."""
        with self._users_lock:
            return [
                name for (ns, name), (key, _) in self._users.items() if ns == namespace and key == cache_key
            ]

    def users_of_claim(self, namespace: str, claim: str) -> list[str]:
        """Resources in `namespace` that build into and serve from `claim`."""
        with self._users_lock:
            return [
                name for (ns, name), (_, used) in self._users.items() if ns == namespace and used == claim
            ]

    def forget(self, namespace: str, name: str) -> None:
        """The resource was deleted: its children go with the garbage collector."""
        with self._plans_lock:
            self._release_plan((namespace, name))
        with self._users_lock:
            self._users.pop((namespace, name), None)
        with self._specs_lock:
            self._specs.pop((namespace, name), None)
            self._reread.discard((namespace, name))
            self._confirm.pop((namespace, name), None)
        self._publish_phase(namespace, name, None)

    @property
    def plans_held(self) -> int:
        """How many distinct plans are memoised (one per spec some resource has)."""
        with self._plans_lock:
            return len(self._plans)

    def forget_all_but(self, live: Iterable[Key]) -> None:
        """Forget every resource not in `live` (the resources the cache holds).

        A deletion that arrives while the resource's reconcile is still running leaves that reconcile's
        bookkeeping behind: one plan and one phase each time.
        """
        with self._plans_lock:
            known = set(self._plan_of)
        with self._users_lock:
            known.update(self._users)
        with self._specs_lock:
            known.update(self._specs)
        with self._phases_lock:
            known.update(self._phases)
        for namespace, name in known - set(live):
            self.forget(namespace, name)

    # -- one reconcile ---------------------------------------------------------------------------

    def _plan(self, body: Mapping[str, Any]) -> tuple[MultimodalDeployment, ResourcePlan] | InvalidSpecError:
        """The checked plan of a resource, memoised by its spec (nothing in a plan depends on the name)."""
        metadata = dict(body.get("metadata", {}))
        name_problems = name_problem(str(metadata.get("name", "")))
        if name_problems:
            return InvalidSpecError(name_problems)
        filled_spec = self.config.with_spec_defaults(body.get("spec"))
        fingerprint = hashing.digest(filled_spec)
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        with self._plans_lock:
            cached_plan = self._plans.get(fingerprint)
        if cached_plan is None:
            document = {
                "apiVersion": body.get("apiVersion"),
                "kind": body.get("kind"),
                "metadata": {"name": PLAN_NAME},
                "spec": filled_spec,
            }
            try:
                cached_plan = plan_resource(document)[1]
            except InvalidSpecError as invalid:
                cached_plan = invalid
        with self._plans_lock:
            if self._plan_of.get(key) != fingerprint:
                self._release_plan(key)
                self._plan_of[key] = fingerprint
                self._plan_users.setdefault(fingerprint, set()).add(key)
            cached_plan = self._plans.setdefault(fingerprint, cached_plan)
        if isinstance(cached_plan, InvalidSpecError):
            return cached_plan
        spec = cached_plan.settings.spec
        return MultimodalDeployment(metadata=metadata, spec=spec), cached_plan

    def _release_plan(self, key: Key) -> None:
        """`key` no longer has the spec it had; its plan goes with the last resource that had it."""
        fingerprint = self._plan_of.pop(key, None)
        if fingerprint is None:
            return
        users = self._plan_users[fingerprint]  # `_plan` sets both together
        users.discard(key)
        if not users:
            del self._plan_users[fingerprint]
            self._plans.pop(fingerprint, None)

    def reconcile(self, namespace: str, name: str) -> Outcome:
        """Bring one resource's children and status in line with its spec."""
        started = time.perf_counter()
        body = self._settled_body(namespace, name)
        if body is _UNSETTLED:
            return Outcome(phase=None, writes=0, requeue_after=REREAD_SECONDS)
        if body is None or body.get("metadata", {}).get("deletionTimestamp"):
            self.forget(namespace, name)
            return Outcome(phase=None, writes=0)
        try:
            outcome = self._reconcile(body)
        except ApiError as error:
            if error.namespace_terminating:
                # The namespace is going, and this resource with it: nothing to restore.
                _log.info("Stopped reconciling %s/%s: its namespace is being deleted", namespace, name)
                return Outcome(phase=None, writes=0)
            if error.not_found and self._gone(namespace, name):
                return Outcome(phase=None, writes=0)
            metrics.RECONCILES.labels(outcome="error").inc()
            raise
        except Exception:
            metrics.RECONCILES.labels(outcome="error").inc()
            raise
        finally:
            metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
        metrics.RECONCILES.labels(outcome="changed" if outcome.writes else "unchanged").inc()
        self._publish_phase(namespace, name, outcome.phase)
        with self._specs_lock:
            due = self._confirm.get((namespace, name))
        if due is not None:
            wait = max(due - time.monotonic(), 0.1)
            requeue = min(wait, outcome.requeue_after) if outcome.requeue_after is not None else wait
            outcome = Outcome(phase=outcome.phase, writes=outcome.writes, requeue_after=requeue)
        return outcome

    def _gone(self, namespace: str, name: str) -> bool:
        """After a 404: whether the resource itself is gone, though no deletion event said so; then forget it.

        A watch broken at the wrong moment (an API server outage) can miss a deletion, and every
        reconcile of the deleted resource would fail on its status for good. Its children, if this
        reconcile made any, belong to an owner that no longer exists: the garbage collector takes them.
        """
        if self.client.get(API_VERSION, KIND, namespace, name) is not None:
            return False
        _log.info("%s/%s is gone without a deletion event; forgetting it", namespace, name)
        self.store.drop(cached.RESOURCES, namespace, name)
        self.forget(namespace, name)
        return True

    def _settled_body(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The resource to reconcile, or `_UNSETTLED` while its spec reads two ways.

        A generation has one spec. Right after its CRD changes, the API server can still answer some
        reads and watches through the old schema, which prunes the fields it does not know: the same
        generation then arrives in two shapes, and acting on the pruned one would roll the pods back.
        When that happens the operator waits, then reads the resource again, until two reads agree.
        """
        key = (namespace, name)
        with self._specs_lock:
            due = self._confirm.get(key)
            confirm = due is not None and time.monotonic() >= due
            if confirm:
                del self._confirm[key]
            reread = key in self._reread or confirm
            self._reread.discard(key)
        if reread:
            fresh = self.client.get(API_VERSION, KIND, namespace, name)
            if fresh is None:
                return None
            self.store.put(cached.RESOURCES, fresh)
        body: Mapping[str, Any] | None = self.store.get(cached.RESOURCES, namespace, name)
        if body is None:
            return None
        metadata = body.get("metadata", {})
        seen = (
            str(metadata.get("uid", "")),
            int(metadata.get("generation", 1)),
            hashing.digest(body.get("spec")),
        )
        with self._specs_lock:
            last = self._specs.get(key)
            self._specs[key] = seen
            if last is not None and last[0] == seen[0] and last[1] < seen[1]:
                # A new generation: read it once more when any old schema has surely gone, since the
                # read that brought it may have been the last event to come.
                self._confirm[key] = time.monotonic() + CONFIRM_SECONDS
            if last is not None and last[:2] == seen[:2] and last[2] != seen[2]:
                self._reread.add(key)
                _log.warning(
                    "%s/%s generation %d reads with two different specs (its CRD just changed?); "
                    "reading it again in %.0f s",
                    namespace,
                    name,
                    seen[1],
                    REREAD_SECONDS,
                )
                return _UNSETTLED
        return body

    def _publish_phase(self, namespace: str, name: str, phase: Phase | None) -> None:
        # Workers run in parallel: tally under the lock so no thread counts a dict another one is changing.
        with self._phases_lock:
            if phase is None:
                self._phases.pop((namespace, name), None)
            else:
                self._phases[(namespace, name)] = phase
            metrics.set_phases(self._phases)

    def _previous(self, body: Mapping[str, Any]) -> MultimodalDeploymentStatus | None:
        try:
            return (
                MultimodalDeploymentStatus.model_validate(body.get("status") or {})
                if body.get("status")
                else None
            )
        except ValidationError:
            return None  # written by another version; recompute from scratch

    def _reconcile(self, body: Mapping[str, Any]) -> Outcome:
        metadata = body["metadata"]
        namespace, name = str(metadata["namespace"]), str(metadata["name"])
        generation = int(metadata.get("generation", 1))
        previous = self._previous(body)
        now = self.clock()
        count = WriteCount()
        planned = self._plan(body)
        if isinstance(planned, InvalidSpecError):
            result = report(
                Findings(generation=generation, problems=planned.problems), previous=previous, now=now
            )
            self._write_status(body, previous, result, count)
            return Outcome(phase=result.status.phase, writes=count.total)

        resource, plan = planned
        claim = engine_build.claim_name(resource, self.config)
        first_look = False
        with self._users_lock:
            known = self._users.get((namespace, name))
            first_look = known is None or known[0] != plan.cache_key
            self._users[(namespace, name)] = (plan.cache_key, claim)
        observed = observe(self.store, self.client, resource, cache_key=plan.cache_key, claim=claim, now=now)
        if first_look and (
            previous is None or previous.engine is None or previous.engine.cache_key != plan.cache_key
        ):
            metrics.ENGINE_CACHE.labels(result="hit" if observed.engine is not None else "miss").inc()
        judged = judge(plan.cache_key, observed, previous, generation)
        decision = desired_state(resource, plan, observed, judged, config=self.config)
        owner = ownership.owner_of(resource)

        for manifest in decision.apply:
            self.writer.apply(manifest, count)
        for key in decision.join:
            self.writer.join(namespace, key, owner, count)
        for key in decision.leave:
            self.writer.leave(namespace, key, owner, count)
        for key in decision.delete:
            self.writer.delete(namespace, key, count)
        if decision.record is not None:
            claim_facts = self.store.get(cached.CLAIMS, namespace, claim)
            index = record_build(
                self.client,
                namespace=namespace,
                claim=claim,
                claim_uid=claim_facts.meta.uid if claim_facts is not None else None,
                summary=decision.record,
            )
            self.store.put(cached.CONFIGMAPS, index)
            metrics.BUILDS.labels(outcome="succeeded").inc()
            metrics.BUILD_SECONDS.observe(decision.record.seconds)  # as the builder measured it
            count.applied.append(f"engine-index/{plan.cache_key}")

        if count.total:
            # Report what the world looks like after these writes, not before them.
            observed = observe(
                self.store, self.client, resource, cache_key=plan.cache_key, claim=claim, now=now
            )
            judged = judge(plan.cache_key, observed, previous, generation)
        findings = assess(resource, plan, observed, judged, decision.rendered, claim=claim)
        result = report(findings, previous=previous, now=now)
        engine = judged.engine
        if engine.reason == "BuildFailed" and not _reported(previous, "BuildFailed"):
            metrics.BUILDS.labels(outcome="failed").inc()
        self._write_status(body, previous, result, count)
        requeue = result.recheck_after
        if observed.missing or engine.retry:
            requeue = min(requeue or self.config.retry_seconds, self.config.retry_seconds)
        if count.total:
            _log.info(
                "Reconciled %s/%s: %s",
                namespace,
                name,
                ", ".join(count.applied + count.owners + count.deleted),
            )
        return Outcome(phase=result.status.phase, writes=count.total, requeue_after=requeue)

    def _write_status(
        self,
        body: Mapping[str, Any],
        previous: MultimodalDeploymentStatus | None,
        result: Report,
        count: WriteCount,
    ) -> None:
        new = result.status.model_dump(by_alias=True, exclude_none=True, mode="json")
        old = (
            previous.model_dump(by_alias=True, exclude_none=True, mode="json")
            if previous is not None
            else None
        )
        if new == old:
            return
        updated = self.writer.status(body, new)
        count.applied.append("status")
        for event in result.events:
            self.events.record(updated, type=event.type, reason=event.reason, message=event.message)


def _reported(previous: MultimodalDeploymentStatus | None, reason: str) -> bool:
    if previous is None:
        return False
    return any(c.type == "EngineReady" and c.reason == reason for c in previous.conditions)


__all__ = ["ApiError", "Outcome", "Reconciler"]
