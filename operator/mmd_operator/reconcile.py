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
    MultimodalDeployment,
    MultimodalDeploymentSpec,
    MultimodalDeploymentStatus,
    Phase,
)
from mmd_operator.api.validation import InvalidSpecError, Problem, spec_runtime
from mmd_operator.config import OperatorConfig
from mmd_operator.desired import cache, scaling
from mmd_operator.desired.decision import Desired, desired_state
from mmd_operator.facts import Observed, OwnerRef, Reading
from mmd_operator.judgement import Judgement, judge
from mmd_operator.judgement.artifact import JobWords
from mmd_operator.judgement.canary import analysis_window
from mmd_operator.judgement.gpu_kinds import KindChoice, claim_of, kinds_by_claim, kinds_for, kinds_in_reach
from mmd_operator.judgement.judge import ARTIFACT_WORDS
from mmd_operator.judgement.revisions import RETRY_ANNOTATION
from mmd_operator.knowledge import Runtime
from mmd_operator.kube import cache as cached
from mmd_operator.kube import object_facts
from mmd_operator.kube.client import ApiError, KubeClient
from mmd_operator.kube.devices import DeviceDirectory
from mmd_operator.kube.events import EventRecorder
from mmd_operator.kube.nodes import NodeDirectory
from mmd_operator.kube.observe import observe, revision_template
from mmd_operator.kube.prometheus import read_counts
from mmd_operator.kube.quotas import QuotaDirectory
from mmd_operator.kube.settling import REREAD_SECONDS, UNSETTLED, SpecSettling
from mmd_operator.kube.writes import WriteCount, Writer
from mmd_operator.plan.fit import fit
from mmd_operator.plan.resource_plan import AnyPlan
from mmd_operator.plan_memory import PlanMemory, Planned, Use
from mmd_operator.status import Findings, Report, previous_status, recorded_kind, report, transition
from mmd_operator.status.assessment import assess
from mmd_operator.vocabulary import kinds, labels, ownership
from mmd_operator.vocabulary.ownership import ObjectKey

_log = logging.getLogger(__name__)
Key = tuple[str, str]
# How soon a resource whose placement reached no known node, or several kinds, is looked at again (the
# node listing is renewed then, at most every few seconds): a pool that just joined or left, within this.
KIND_RECHECK_SECONDS = 15.0


@dataclass(frozen=True)
class Outcome:
    """What a reconcile did, and when to look at the resource again without an event."""

    phase: Phase | None
    writes: int
    requeue_after: float | None = None


@dataclass(frozen=True)
class _Case:
    """One reconcile of a resource whose spec has a checked plan: what every step of it reads."""

    body: Mapping[str, Any]
    key: Key
    generation: int
    previous: MultimodalDeploymentStatus | None
    now: datetime
    resource: MultimodalDeployment
    plan: AnyPlan
    warnings: tuple[str, ...]
    claim: str
    # Whether this reconcile is the resource's first look at its plan's artifact (for the lookup metric).
    first_look: bool
    counted: metrics.ArtifactMetrics | None
    # Whether its placement reached no node the listing knows (look again soon: a pool may have joined).
    recheck_kind: bool = False


@dataclass(frozen=True)
class _Judging:
    """How one reconcile judges its world, the same before and after its writes."""

    case: _Case
    retry: str | None
    reading: Reading | None
    # The last Ready revision's template, when the first judgement undoes a revision.
    stable_template: dict[str, Any] | None = None

    def unchecked(self, observed: Observed) -> Judgement:
        """The judgement of `observed`, an undo in it taken as it comes."""
        case = self.case
        return judge(
            case.plan,
            observed,
            case.previous,
            case.generation,
            case.resource.spec,
            retry=self.retry,
            reading=self.reading,
        )

    def undoable(self, judged: Judgement) -> Judgement:
        """`judged`, without its undo when the stable revision left no record to go back to.

        That record is a ReplicaSet or a ControllerRevision, which their controllers prune.
        """
        writes_undo = judged.undo is not None and judged.undo.write
        return (
            dataclasses.replace(judged, undo=None) if writes_undo and self.stable_template is None else judged
        )

    def __call__(self, observed: Observed) -> Judgement:
        """The judgement of `observed` this reconcile acts on."""
        return self.undoable(self.unchecked(observed))


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
        self.devices = DeviceDirectory(client)
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
        self.writer.forget(namespace, name)

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
        """Observe, judge, decide, write, and after any write observe and judge again; assess, report."""
        now, count = self.clock(), WriteCount()
        kind = self._gpu_kind(body)
        planned = self.plans.plan(body, kind.kind)
        if isinstance(planned, InvalidSpecError):
            return self._refuse(body, planned, now, count)
        fitted = fit(planned[1].plan.gpu_needs, kind.offers)
        refusal = kind.refusal or fitted.refusal
        if refusal is not None:
            refused = self._refuse(body, InvalidSpecError([Problem(*refusal)]), now, count)
            # A refusal for the kinds in reach holds only while the nodes do: look again soon.
            return (
                dataclasses.replace(refused, requeue_after=KIND_RECHECK_SECONDS) if kind.unseen else refused
            )
        case = self._case(
            body, *planned, now, kind.notice, tuple(f"{path}: {said}" for path, said in fitted.warnings)
        )
        case = dataclasses.replace(case, recheck_kind=kind.unseen)
        observed = self._observe(case, first=True)
        judging, judged = self._judge_first(case, observed)
        decision = self._decide(case, observed, judged, judging.stable_template)
        self._write(case, decision, count)
        if count.total:
            # Report what the world looks like after these writes, not before them.
            observed = self._observe(case)
            judged = judging(observed)
        result = self._assess(case, observed, judged, decision)
        self._report(case, observed, judged, result, count)
        return self._outcome(case, observed, judged, result, count)

    def _refuse(
        self, body: Mapping[str, Any], refused: InvalidSpecError, now: datetime, count: WriteCount
    ) -> Outcome:
        """Report a spec the plan refuses (InvalidSpec, every problem); nothing else is written."""
        metadata, previous = body["metadata"], previous_status(body)
        key = (str(metadata["namespace"]), str(metadata["name"]))
        findings = Findings(
            generation=int(metadata.get("generation", 1)),
            runtime=spec_runtime(body.get("spec")),
            problems=refused.problems,
        )
        result = report(findings, previous=previous, now=now)
        self._write_status(body, previous, result, count)
        _log_transition(*key, previous, result)
        # A refused spec changes nothing that runs, and its status keeps showing the pods: the
        # autoscaler (not looked at) as last seen; whether a Job still runs is not known unlooked.
        sample = metrics.resource_sample(result.status, None, None, None)
        kept = self.series.last(key)
        if kept is not None and kept.autoscaler is not None:
            sample = dataclasses.replace(sample, wanted=kept.wanted, autoscaler=kept.autoscaler)
        self.series.publish(key, sample)
        return Outcome(phase=result.status.phase, writes=count.total)

    def _gpu_kind(self, body: Mapping[str, Any]) -> KindChoice:
        """The kind of GPU the resource's engine is built for, and the kinds its pods run on.

        Of the nodes its serving placement reaches, or the kind it was built for; for an artifact that
        serves on any GPU, no kind but every kind in reach.
        """
        spec = body.get("spec")
        recorded = recorded_kind(previous_status(body))
        claim = claim_of(spec)
        if claim is not None:
            choice = kinds_by_claim(spec, claim, self.devices.devices(), recorded)
            if choice.kind is None and choice.refusal is None:
                # No device admitted: the listing may predate the GPUs a driver just published.
                choice = kinds_by_claim(spec, claim, self.devices.devices(renew=True), recorded)
            return dataclasses.replace(choice, unseen=choice.kind is None and choice.refusal is None)
        serving = (spec.get("serving") if isinstance(spec, Mapping) else None) or {}
        placement = object_facts.pod_placement(
            serving.get("pod") or {} if isinstance(serving, Mapping) else {}
        )
        nodes, reach = self.nodes.nodes(), None
        if nodes is not None:
            reach = kinds_in_reach(placement, nodes)
            if (not reach.kinds and not reach.unlabelled) or len(reach.kinds) > 1:
                # Nothing in reach, or several kinds: the listing may predate a node pool that just
                # joined, or one that just left.
                nodes = self.nodes.nodes(renew=True) or nodes
                reach = kinds_in_reach(placement, nodes)
        choice = kinds_for(spec, reach, recorded)
        unseen = reach is not None and not reach.kinds and not reach.unlabelled
        return dataclasses.replace(choice, unseen=unseen or choice.refusal is not None)

    def _case(
        self,
        body: Mapping[str, Any],
        resource: MultimodalDeployment,
        checked: Planned,
        now: datetime,
        notice: str = "",
        fit_warnings: tuple[str, ...] = (),
    ) -> _Case:
        """What the steps of the reconcile of `resource` read, its plan's use recorded."""
        metadata = body["metadata"]
        key = (str(metadata["namespace"]), str(metadata["name"]))
        plan = checked.plan
        claim = cache.claim_name(resource, self.config)
        return _Case(
            body=body,
            key=key,
            generation=int(metadata.get("generation", 1)),
            previous=previous_status(body),
            now=now,
            resource=resource,
            plan=plan,
            warnings=checked.warnings + ((f"spec.serving.pod: {notice}",) if notice else ()) + fit_warnings,
            claim=claim,
            first_look=self.plans.record_use(key, Use(plan.cache_key, claim)),
            counted=metrics.ARTIFACT_METRICS[plan.runtime],
        )

    def _observe(self, case: _Case, *, first: bool = False) -> Observed:
        """The resource's world from the cache (and the few reads `observe` makes)."""
        observed = observe(
            self.store,
            self.client,
            case.resource,
            case.plan,
            claim=case.claim,
            now=case.now,
            nodes=self.nodes,
            quotas=self.quotas,
        )
        if (
            first
            and case.counted is not None
            and case.first_look
            and _new_key(case.previous, case.plan.cache_key)
        ):
            case.counted.looked_up(observed.artifact is not None)
        return observed

    def _judge_first(self, case: _Case, observed: Observed) -> tuple[_Judging, Judgement]:
        """The judgement of the world as first observed, and how to judge it again after the writes.

        A revision to undo needs the stable revision's template, read here once.
        """
        metadata = case.body["metadata"]
        judging = _Judging(
            case=case,
            retry=(metadata.get("annotations") or {}).get(RETRY_ANNOTATION),
            reading=self._canary_reading(
                case.resource.spec, case.plan.runtime, case.key[0], observed, case.previous, case.now
            ),
        )
        judged = judging.unchecked(observed)
        if judged.undo is not None and judged.undo.write and observed.deployment is not None:
            template = revision_template(
                self.client, case.key[0], observed.deployment, judged.undo.to.pod_template_hash
            )
            judging = dataclasses.replace(judging, stable_template=template)
        return judging, judging.undoable(judged)

    def _decide(
        self, case: _Case, observed: Observed, judged: Judgement, stable_template: dict[str, Any] | None
    ) -> Desired:
        """What to apply, join, leave, delete and record (`desired`)."""
        return desired_state(
            case.resource, case.plan, observed, judged, config=self.config, stable_template=stable_template
        )

    def _write(self, case: _Case, decision: Desired, count: WriteCount) -> None:
        """Carry the decision out, and record a finished Job's artifact in the engine index."""
        self.writer.carry_out(
            case.key[0],
            ownership.owner_of(case.resource),
            count,
            apply=decision.apply,
            join=decision.join,
            leave=decision.leave,
            delete=decision.delete,
            handover=decision.handover,
            handover_manager=scaling.handover_manager(self.config.field_manager),
            generated=decision.generated_secrets,
            heir=lambda child, live: self._heir(case, child, live),
        )
        if decision.record is not None:
            self.writer.record_build(case.key[0], case.claim, decision.record, count)
            if case.counted is not None:
                case.counted.finished(succeeded=True, seconds=decision.record.seconds)

    def _heir(self, case: _Case, child: ObjectKey, live: Mapping[str, Any]) -> OwnerRef | None:
        """Another resource of the namespace whose plan uses `child`, which `case`'s resource leaves last.

        A Job is used by the plans with its cacheKey and claim, a claim by those that name it. Each
        resource is planned as its own reconcile plans it (memoised per spec), so one whose reconcile
        is still queued counts too; the first by name is the heir.
        """
        namespace, leaving = case.key
        found = (live.get("metadata") or {}).get("labels") or {}
        made = Use(found.get(labels.CACHE_KEY, ""), found.get(labels.ENGINE_CACHE_CLAIM, ""))

        def uses_child(use: Use) -> bool:
            return use == made if child.kind == kinds.JOB.kind else use.claim == child.name

        for body in sorted(self.store.all(cached.RESOURCES, namespace), key=lambda b: b["metadata"]["name"]):
            metadata = body["metadata"]
            if metadata["name"] == leaving or metadata.get("deletionTimestamp"):
                continue
            use = self._use_of(body)
            if use is not None and uses_child(use):
                return OwnerRef(name=str(metadata["name"]), uid=str(metadata["uid"]))
        return None

    def _use_of(self, body: Mapping[str, Any]) -> Use | None:
        """What `body`'s plan uses, planned as its reconcile plans it; None when that refuses it."""
        kind = self._gpu_kind(body)
        planned = self.plans.plan(body, kind.kind)
        if isinstance(planned, InvalidSpecError) or kind.refusal is not None:
            return None
        resource, checked = planned
        if fit(checked.plan.gpu_needs, kind.offers).refusal is not None:
            return None
        return Use(checked.plan.cache_key, cache.claim_name(resource, self.config))

    def _assess(self, case: _Case, observed: Observed, judged: Judgement, decision: Desired) -> Report:
        """The findings of the world as last observed, and the status and events that say them (`status`)."""
        findings = assess(
            case.resource,
            case.plan,
            observed,
            judged,
            decision.rendered,
            claim=case.claim,
            warnings=case.warnings,
        )
        return report(findings, previous=case.previous, now=case.now)

    def _report(
        self, case: _Case, observed: Observed, judged: Judgement, result: Report, count: WriteCount
    ) -> None:
        """Write the status (and its events) if it changed; count a failed Job once; publish the series."""
        artifact, words = judged.artifact, ARTIFACT_WORDS[case.plan.runtime]
        if (
            case.counted is not None
            and artifact.reason == words.failed
            and not _reported(case.previous, words)
        ):
            case.counted.finished(succeeded=False)
        self._write_status(case.body, case.previous, result, count)
        _log_transition(*case.key, case.previous, result)
        undone = metrics.rollback(case.previous, result.status)
        if undone is not None:
            self.series.rolled_back(case.key, undone)
        job = _running_job(observed, judged)
        self.series.publish(
            case.key,
            metrics.resource_sample(
                result.status,
                case.resource.spec.serving.autoscaling,
                observed.autoscaler,
                (metrics.ARTIFACT_LABEL[case.plan.runtime], job) if job is not None else None,
            ),
        )

    def _outcome(
        self, case: _Case, observed: Observed, judged: Judgement, result: Report, count: WriteCount
    ) -> Outcome:
        """The phase, the writes, and when to look again without an event."""
        requeue = result.recheck_after
        if observed.missing or judged.artifact.retry or observed.job_pod_mounting:
            requeue = min(requeue or self.config.retry_seconds, self.config.retry_seconds)
        if case.recheck_kind:
            requeue = min(requeue or KIND_RECHECK_SECONDS, KIND_RECHECK_SECONDS)
        if count.total:
            _log.debug(
                "Reconciled %s/%s: %s", *case.key, ", ".join(count.applied + count.owners + count.deleted)
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
