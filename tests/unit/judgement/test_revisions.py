"""A revision that cannot start is undone to the last one whose every pod was ready: once, then held until
the spec or the retry annotation changes; a resource that never had a Ready revision is left as it is."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from mmd_operator.api.v1alpha1 import RollbackStatus, ServingRevision
from mmd_operator.desired import serving
from mmd_operator.desired.decision import desired_state
from mmd_operator.facts import DeploymentFacts, Meta, Observed, PodFacts, PodPhase
from mmd_operator.judgement import judge
from mmd_operator.judgement.revisions import (
    RETRY_ANNOTATION,
    ROLLED_BACK,
    stable_revision,
    undo,
)
from mmd_operator.kube import object_facts
from mmd_operator.status import report
from mmd_operator.vocabulary import labels
from tests.support.builds import summary
from tests.support.decisions import CONFIG, ME, NOW, bound_claim, example, meta
from tests.unit.judgement.test_rollout import _decide

STABLE = ServingRevision(pod_template_hash="aaaa", cache_key="key-a", content="llava-repo-a")
CRASH = "container server is in CrashLoopBackOff (back-off 10s, exit code 1); it last said: engine missing"


def _pod(name: str, template_hash: str, **more: Any) -> PodFacts:
    fields: dict[str, Any] = {
        "meta": Meta(
            name=name,
            labels=(
                (labels.DEPLOYMENT_REVISION, template_hash),
                (labels.CACHE_KEY, f"key-{template_hash[0]}"),
            ),
        ),
        "phase": PodPhase.RUNNING,
        "configmap": f"llava-repo-{template_hash[0]}",
        **more,
    }
    return PodFacts(**fields)


OLD = _pod("llava-aaaa-1", "aaaa", ready=True)
CRASHING = _pod("llava-bbbb-1", "bbbb", crash_loop=CRASH, restarts=3)


def _shown(resource: Any, plan: Any, **facts: Any) -> Any:
    decided = _decide(resource, plan, **facts)
    assert decided.findings is not None
    return report(decided.findings, previous=None, now=NOW).status


def test_the_stable_revision_is_the_one_every_ready_pod_runs_once_the_rollout_is_done() -> None:
    done = DeploymentFacts(
        meta=meta("llava"), replicas=1, status_replicas=1, updated_replicas=1, ready_replicas=1,
        available_replicas=1,
    )  # fmt: skip
    assert stable_revision(None, done, (OLD,)) == STABLE
    rolling = DeploymentFacts(
        meta=meta("llava"), replicas=1, status_replicas=2, updated_replicas=1, ready_replicas=1,
        available_replicas=1,
    )  # fmt: skip
    assert stable_revision(STABLE, rolling, (OLD, CRASHING)) == STABLE
    assert stable_revision(None, rolling, (OLD, CRASHING)) is None
    # Scaled to zero and at rest: forgotten (nothing runs it, and its ConfigMap would outlive every pod).
    scaling_down = DeploymentFacts(meta=meta("llava"), replicas=0, status_replicas=1)
    assert stable_revision(STABLE, scaling_down, (OLD,)) == STABLE
    assert stable_revision(STABLE, DeploymentFacts(meta=meta("llava"), replicas=0), ()) is None


def test_a_revision_that_cannot_start_is_undone_once_then_held_until_the_spec_or_retry_changes() -> None:
    resource, plan = example()
    previous = _shown(resource, plan).model_copy(update={"stable_revision": STABLE})
    pods = (OLD, CRASHING)
    budget = 1800.0
    first = undo(previous, generation=1, retry=None, pods=pods, now=NOW, startup_budget=budget)
    assert first is not None and first.write and first.to == STABLE and first.failed == "bbbb"
    assert first.message == (
        f"revision bbbb did not start: pod llava-bbbb-1: {CRASH}; rolled back to revision aaaa (cacheKey "
        "key-a, ConfigMap llava-repo-a), which serves: apply a fixed spec, or set the annotation "
        f"{RETRY_ANNOTATION} to a new value to try this revision again"
    )

    # The decision takes the stable template back; the status says so, Degraded, with one event.
    template = {"metadata": {"labels": {"app": "llava"}}, "spec": {"containers": [{"name": "server"}]}}
    repositories = (meta("llava-repo-a", owners=(ME,)), meta("llava-repo-old", owners=(ME,)))
    observed = Observed(
        now=NOW,
        claim=bound_claim(),
        artifact=summary(plan.cache_key),
        serving_pods=pods,
        configmaps=repositories,
    )
    judged = judge(plan, observed, previous, 1, resource.spec)
    assert judged.undo is not None and judged.undo.write
    written = desired_state(resource, plan, observed, judged, config=CONFIG, stable_template=template)
    deployment = written.manifest("Deployment")
    assert deployment is not None and deployment["spec"]["template"] == template
    assert deployment["metadata"]["annotations"][serving.UNDONE_REVISION] == "bbbb"
    # The stable revision's ConfigMap is kept; one no revision uses is not.
    assert [key.name for key in written.delete] == ["llava-repo-old"]

    # Held: an earlier reconcile wrote it; the live Deployment is left as it is.
    undone = previous.model_copy(
        update={"rollback": RollbackStatus(generation=1, failed="bbbb", message=first.message)}
    )
    held = undo(undone, generation=1, retry=None, pods=(OLD,), now=NOW, startup_budget=budget)
    assert held is not None and not held.write and held.message == first.message
    assert undo(undone, generation=2, retry=None, pods=(OLD,), now=NOW, startup_budget=budget) is None
    assert undo(undone, generation=1, retry="again", pods=(OLD,), now=NOW, startup_budget=budget) is None


def test_the_status_of_an_undone_revision_is_degraded_rolled_back_with_one_event() -> None:
    resource, plan = example()
    stable_shown = _shown(resource, plan).model_copy(update={"stable_revision": STABLE})
    decided = _decide(resource, plan, stable_shown, serving_pods=(OLD, CRASHING))
    assert decided.findings is not None
    shown = report(decided.findings, previous=stable_shown, now=NOW)
    assert shown.status.phase == "Degraded"
    ready = next(c for c in shown.status.conditions if c.type == "Ready")
    assert ready.reason == ROLLED_BACK and ready.message.startswith("revision bbbb did not start")
    assert shown.status.rollback is not None and shown.status.rollback.failed == "bbbb"
    assert shown.status.stable_revision == STABLE
    assert [e.reason for e in shown.events].count(ROLLED_BACK) == 1
    live = DeploymentFacts(meta=meta("llava", applied="digest-of-the-undo"), replicas=1)
    again = _decide(resource, plan, shown.status, deployment=live, serving_pods=(OLD,))
    assert again.findings is not None
    later = report(again.findings, previous=shown.status, now=NOW + timedelta(seconds=30))
    assert later.status.rollback == shown.status.rollback and ROLLED_BACK not in [
        e.reason for e in later.events
    ]
    assert again.manifest("Deployment") is None  # held: the live Deployment is left as it is
    assert again.rendered.deployment_digest == "digest-of-the-undo"


def test_a_resource_that_never_had_a_ready_revision_is_left_as_it_is() -> None:
    assert undo(None, generation=1, retry=None, pods=(CRASHING,), now=NOW, startup_budget=1800) is None
    slow = _pod("llava-bbbb-2", "bbbb", started=NOW - timedelta(seconds=1801))
    resource, plan = example()
    previous = _shown(resource, plan).model_copy(update={"stable_revision": STABLE})
    late = undo(previous, generation=1, retry=None, pods=(OLD, slow), now=NOW, startup_budget=1800)
    assert late is not None and "still not ready after its startup budget of 1800 s" in late.message


def test_an_init_container_that_cannot_pull_its_image_is_a_pod_that_cannot_start() -> None:
    """The serving pods assemble their repository in an init container of the serving image: a bad image
    fails there first, with the server container only waiting (PodInitializing)."""
    waiting = {"reason": "ErrImagePull", "message": 'failed to resolve reference "registry.invalid/x:0"'}
    pod = object_facts.pod(
        {
            "metadata": {"name": "llava-bbbb-1", "labels": {labels.DEPLOYMENT_REVISION: "bbbb"}},
            "spec": {"containers": [{"name": "server"}]},
            "status": {
                "phase": "Pending",
                "startTime": "2026-11-23T11:59:00Z",
                "initContainerStatuses": [{"name": "assemble-repository", "state": {"waiting": waiting}}],
                "containerStatuses": [
                    {"name": "server", "state": {"waiting": {"reason": "PodInitializing"}}}
                ],
            },
        }
    )
    assert pod.crash_loop is not None and pod.crash_loop.startswith(
        "container assemble-repository is in ErrImagePull (failed to resolve reference"
    )
    resource, plan = example()
    previous = _shown(resource, plan).model_copy(update={"stable_revision": STABLE})
    found = undo(previous, generation=1, retry=None, pods=(OLD, pod), now=NOW, startup_budget=1800)
    assert (
        found is not None
        and found.write
        and "pod llava-bbbb-1: container assemble-repository" in found.message
    )
