"""One reconcile of one MultimodalDeployment: plan, observe, judge, decide, write, assess, report.

Level-based and idempotent: whatever triggered it (the resource changed, a child changed, a periodic
resync), a reconcile reads the resource and its children from the cache, derives the checked plan
(memoised per spec), judges the world once (`judgement`), decides what to write from that (`desired`)
and writes only what differs; after writes it observes and judges again, so the status (`status`)
tells what the world looks like after them. A spec the API server admitted but the plan refuses is
reported InvalidSpec with every field path, and nothing is created for it. No kopf here; imports the
layers below it: api, plan, judgement, desired, status, kube (Prometheus too, for a canary), metrics.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mmd_operator import metrics
from mmd_operator.api.v1alpha1 import (
    API_VERSION,
    KIND,
    MultimodalDeploymentSpec,
    MultimodalDeploymentStatus,
    Phase,
)
from mmd_operator.api.validation import InvalidSpecError, spec_runtime
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import cache, scaling
from mmd_operator.desired.decision import desired_state
from mmd_operator.facts import Observed, Reading
from mmd_operator.judgement import Judgement, judge
from mmd_operator.judgement.artifact import JobWords
from mmd_operator.judgement.canary import analysis_window
from mmd_operator.judgement.judge import ARTIFACT_WORDS
from mmd_operator.judgement.revisions import RETRY_ANNOTATION
from mmd_operator.knowledge import Runtime
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import ApiError, KubeClient
from mmd_operator.kube.events import EventRecorder
from mmd_operator.kube.nodes import NodeDirectory
from mmd_operator.kube.observe import observe, revision_template
from mmd_operator.kube.prometheus import read_counts
from mmd_operator.kube.quotas import QuotaDirectory
from mmd_operator.kube.settling import REREAD_SECONDS, UNSETTLED, SpecSettling
from mmd_operator.kube.writes import WriteCount, Writer
from mmd_operator.plan_memory import PlanMemory, Use
from mmd_operator.status import Findings, Report, previous_status, report, transition
from mmd_operator.status.assessment import assess
from mmd_operator.vocabulary import ownership

_log = logging.getLogger(__name__)
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
        self.plans = PlanMemory(config)
        self.settling = SpecSettling(client, store)
        self.nodes = NodeDirectory(client, enabled=config.read_nodes)
        self.quotas = QuotaDirectory(client)
        self.phases = metrics.PhaseTally()
        self.series = metrics.ResourceSeries()

    def forget(self, namespace: str, name: str) -> None:
        """The resource was deleted: its children go with the garbage collector."""
        key = (namespace, name)
        self.plans.forget(key)
        self.settling.forget(key)
        self.phases.publish(key, None)
        self.series.publish(key, None)

    def forget_all_but(self, live: Iterable[Key]) -> None:
        """Forget every resource not in `live` (the resources the cache holds).

        A deletion that arrives while the resource's reconcile is still running leaves that reconcile's
        bookkeeping behind: one plan and one phase each time.
        """
        known = self.plans.known() | self.settling.known() | self.phases.known() | self.series.known()
        for namespace, name in known - set(live):
            self.forget(namespace, name)

    def reconcile(self, namespace: str, name: str) -> Outcome:
        """Bring one resource's children and status in line with its spec."""
        started = time.perf_counter()
        body = self.settling.body(namespace, name)
        if body is UNSETTLED:
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
        self.phases.publish((namespace, name), outcome.phase)
        wait = self.settling.confirm_in(namespace, name)
        if wait is not None:
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

    def _reconcile(self, body: Mapping[str, Any]) -> Outcome:
        metadata = body["metadata"]
        namespace, name = str(metadata["namespace"]), str(metadata["name"])
        generation = int(metadata.get("generation", 1))
        previous = previous_status(body)
        now = self.clock()
        count = WriteCount()
        planned = self.plans.plan(body)
        if isinstance(planned, InvalidSpecError):
            runtime = spec_runtime(body.get("spec"))
            result = report(
                Findings(generation=generation, runtime=runtime, problems=planned.problems),
                previous=previous,
                now=now,
            )
            self._write_status(body, previous, result, count)
            _log_transition(namespace, name, previous, result)
            # A refused spec changes nothing that runs, and its status keeps showing the pods: the
            # autoscaler (not looked at) as last seen; whether a Job still runs is not known unlooked.
            sample = metrics.resource_sample(result.status, None, None, None)
            kept = self.series.last((namespace, name))
            if kept is not None and kept.autoscaler is not None:
                sample = dataclasses.replace(sample, wanted=kept.wanted, autoscaler=kept.autoscaler)
            self.series.publish((namespace, name), sample)
            return Outcome(phase=result.status.phase, writes=count.total)

        resource, checked = planned
        plan = checked.plan
        claim = cache.claim_name(resource, self.config)
        first_look = self.plans.record_use((namespace, name), Use(plan.cache_key, claim))
        counted = metrics.ARTIFACT_METRICS[plan.runtime]

        def look() -> Observed:
            return observe(
                self.store,
                self.client,
                resource,
                plan,
                claim=claim,
                now=now,
                nodes=self.nodes,
                quotas=self.quotas,
            )

        observed = look()
        if counted is not None and first_look and _new_key(previous, plan.cache_key):
            counted.looked_up(observed.artifact is not None)

        retry = (metadata.get("annotations") or {}).get(RETRY_ANNOTATION)
        reading = self._canary_reading(resource.spec, plan.runtime, namespace, observed, previous, now)

        def judged_now() -> Judgement:
            return judge(plan, observed, previous, generation, resource.spec, retry=retry, reading=reading)

        stable_template = None
        judged = judged_now()
        if judged.undo is not None and judged.undo.write and observed.deployment is not None:
            stable_template = revision_template(
                self.client, namespace, observed.deployment, judged.undo.to.pod_template_hash
            )

        def undoable(judged: Judgement) -> Judgement:
            # Without the stable revision's record (ReplicaSet, ControllerRevision) there is nothing to go
            # back to.
            writes_undo = judged.undo is not None and judged.undo.write
            return (
                dataclasses.replace(judged, undo=None) if writes_undo and stable_template is None else judged
            )

        judged = undoable(judged)
        decision = desired_state(
            resource, plan, observed, judged, config=self.config, stable_template=stable_template
        )

        self.writer.carry_out(
            namespace,
            ownership.owner_of(resource),
            count,
            apply=decision.apply,
            join=decision.join,
            leave=decision.leave,
            delete=decision.delete,
            handover=decision.handover,
            handover_manager=scaling.handover_manager(self.config.field_manager),
            generated=decision.generated_secrets,
        )
        if decision.record is not None:
            self.writer.record_build(namespace, claim, decision.record, count)
            if counted is not None:
                counted.finished(succeeded=True, seconds=decision.record.seconds)

        if count.total:
            # Report what the world looks like after these writes, not before them.
            observed = look()
            judged = undoable(judged_now())
        findings = assess(
            resource, plan, observed, judged, decision.rendered, claim=claim, warnings=checked.warnings
        )
        result = report(findings, previous=previous, now=now)
        artifact, words = judged.artifact, ARTIFACT_WORDS[plan.runtime]
        if counted is not None and artifact.reason == words.failed and not _reported(previous, words):
            counted.finished(succeeded=False)
        self._write_status(body, previous, result, count)
        _log_transition(namespace, name, previous, result)
        undone = metrics.rollback(previous, result.status)
        if undone is not None:
            self.series.rolled_back((namespace, name), undone)
        job = _running_job(observed, judged)
        self.series.publish(
            (namespace, name),
            metrics.resource_sample(
                result.status,
                resource.spec.serving.autoscaling,
                observed.autoscaler,
                (metrics.ARTIFACT_LABEL[plan.runtime], job) if job is not None else None,
            ),
        )
        requeue = result.recheck_after
        if observed.missing or artifact.retry:
            requeue = min(requeue or self.config.retry_seconds, self.config.retry_seconds)
        if count.total:
            _log.debug(
                "Reconciled %s/%s: %s",
                namespace,
                name,
                ", ".join(count.applied + count.owners + count.deleted),
            )
        return Outcome(phase=result.status.phase, writes=count.total, requeue_after=requeue)

    def _canary_reading(
        self,
        spec: MultimodalDeploymentSpec,
        runtime: Runtime,
        namespace: str,
        observed: Observed,
        previous: MultimodalDeploymentStatus | None,
        now: datetime,
    ) -> Reading | None:
        """What Prometheus says of the serving pods over a canary's analysis so far; None: nothing to ask.

        Without a Prometheus URL the analysis judges readiness alone.
        """
        url = self.config.prometheus_url
        if not url or spec.serving.rollout.strategy != "Canary":
            return None
        window = analysis_window(previous, observed.canary, now)
        pods = tuple(pod.meta.name for pod in observed.serving_pods if not pod.meta.deleting)
        if window is None or not pods:
            return Reading()
        return read_counts(url, runtime, namespace, pods, window)

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


def _log_transition(
    namespace: str, name: str, previous: MultimodalDeploymentStatus | None, result: Report
) -> None:
    """A WARNING line when a resource starts failing or fails for a new reason; INFO when it recovers."""
    change = transition(previous, result.status)
    if change is not None:
        (_log.warning if change.failing else _log.info)("%s/%s %s", namespace, name, change.text)


def _reported(previous: MultimodalDeploymentStatus | None, words: JobWords) -> bool:
    """Whether the status shows the artifact's Job failed already (it was counted then)."""
    if previous is None:
        return False
    return any(c.type == words.condition and c.reason == words.failed for c in previous.conditions)


def _running_job(observed: Observed, judged: Judgement) -> str | None:
    """The name of the resource's artifact Job while it runs: not finished, and its artifact not made."""
    job = observed.job
    if job is None or job.meta.deleting or job.succeeded or job.failed:
        return None
    # A pod that reported its result (or failed for good) before the Job controller says so.
    return None if judged.artifact.ready or judged.artifact.failed else job.meta.name


def _new_key(previous: MultimodalDeploymentStatus | None, cache_key: str) -> bool:
    """Whether the status shows another engine than `cache_key`'s (or none): its lookup is new."""
    return previous is None or previous.engine is None or previous.engine.cache_key != cache_key


__all__ = ["ApiError", "Outcome", "Reconciler"]
