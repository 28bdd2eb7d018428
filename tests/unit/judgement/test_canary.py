"""A Canary rollout: the new revision runs as one pod beside the stable ones, is judged on its figures, then
promoted or rolled back; the analysis lives in the status, so another operator resumes it."""

from __future__ import annotations

import dataclasses
import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from mmd_operator.api.v1alpha1 import CanaryVerdict, MultimodalDeploymentStatus, ServingRevision
from mmd_operator.desired import cache
from mmd_operator.desired.decision import desired_state
from mmd_operator.facts import DeploymentFacts, Meta, Observed, PodCounts, PodFacts, PodPhase, Reading
from mmd_operator.judgement import judge
from mmd_operator.judgement.canary import MIN_WINDOW_SECONDS, analysis_window
from mmd_operator.judgement.revisions import RETRY_ANNOTATION, ROLLED_BACK
from mmd_operator.knowledge import Runtime
from mmd_operator.kube.prometheus import read_counts
from mmd_operator.scaling_metrics import analysis_queries
from mmd_operator.status import report
from mmd_operator.status.assessment import assess
from mmd_operator.vocabulary import labels
from tests.support.builds import summary
from tests.support.decisions import CONFIG, NOW, bound_claim, example, meta

STABLE = ServingRevision(pod_template_hash="aaaa", cache_key="key-a", content="llava-repo-a")
CANARY = {"strategy": "Canary", "canary": {"analysisSeconds": 60, "minRequests": 10}}


def _pod(name: str, template_hash: str, *, canary: bool = False, ready: bool = True) -> PodFacts:
    pod_labels = ((labels.DEPLOYMENT_REVISION, template_hash),) + (
        ((labels.TRACK, labels.CANARY),) if canary else ()
    )
    return PodFacts(
        meta=Meta(name=name, labels=pod_labels), phase=PodPhase.RUNNING, ready=ready, configmap="repo"
    )


STABLE_POD = _pod("llava-aaaa-1", "aaaa")
CANARY_POD = _pod("llava-canary-cccc-1", "cccc", canary=True)


def _settled(name: str, digest: str, **more: Any) -> DeploymentFacts:
    counts = {"replicas": 1, "status_replicas": 1, "updated_replicas": 1, "available_replicas": 1}
    return DeploymentFacts(
        meta=meta(name, applied=f"applied-{digest}"), template_digest=digest, **{**counts, **more}
    )


@dataclasses.dataclass
class Step:
    """One reconcile of the canary's story: what it wrote and the status it showed."""

    apply: dict[str, dict[str, Any]]
    delete: list[str]
    status: MultimodalDeploymentStatus
    events: list[str]
    rendered_digest: str | None


class Story:
    """A resource under strategy Canary, reconciled step by step with the status carried over."""

    def __init__(self, **rollout: Any) -> None:
        self.resource, self.plan = example(serving__rollout={**CANARY, **rollout})
        self.configmaps: tuple[Meta, ...] = ()
        wanted = self.decide(deployment=None)
        repository = wanted.apply["ConfigMap"]["metadata"]
        self.configmaps = (meta(repository["name"], applied=repository["annotations"][labels.APPLIED_HASH]),)
        self.digest = wanted.apply["Deployment"]["metadata"]["annotations"][labels.TEMPLATE_DIGEST]
        self.previous: MultimodalDeploymentStatus | None = wanted.status.model_copy(
            update={"stable_revision": STABLE}
        )

    def decide(
        self,
        *,
        now: datetime = NOW,
        reading: Reading | None = None,
        retry: str | None = None,
        generation: int = 1,
        **facts: Any,
    ) -> Step:
        resource = self.resource.model_copy(
            update={"metadata": {**self.resource.metadata, "generation": generation}}
        )
        observed = Observed(
            now=now,
            claim=bound_claim(),
            artifact=summary(self.plan.cache_key),
            configmaps=self.configmaps,
            **facts,
        )
        previous = getattr(self, "previous", None)
        judged = judge(self.plan, observed, previous, generation, resource.spec, retry=retry, reading=reading)
        decision = desired_state(resource, self.plan, observed, judged, config=CONFIG)
        claim = cache.claim_name(resource, CONFIG)
        findings = assess(resource, self.plan, observed, judged, decision.rendered, claim=claim)
        shown = report(findings, previous=previous, now=now)
        self.previous = shown.status
        return Step(
            apply={m["kind"] + ("/canary" if m["metadata"]["name"].endswith("-canary") else ""): m
                   for m in decision.apply},
            delete=[key.name for key in decision.delete],
            status=shown.status,
            events=[event.reason for event in shown.events],
            rendered_digest=decision.rendered.deployment_digest,
        )  # fmt: skip

    def live(self) -> dict[str, Any]:
        """The world with the stable pod and its Deployment on the old revision, and the canary's."""
        canary = _settled("llava-canary", self.digest)
        return {
            "deployment": _settled("llava", "old-digest"),
            "canary": canary,
            "serving_pods": (STABLE_POD, CANARY_POD),
        }


def _reading(failed: float = 0, latency: float = 0.5, answered: float = 20) -> Reading:
    return Reading(
        counts={
            STABLE_POD.meta.name: PodCounts(answered=100, failed=0, latency_seconds=50),
            CANARY_POD.meta.name: PodCounts(
                answered=answered, failed=failed, latency_seconds=answered * latency
            ),
        }
    )


def test_a_change_runs_first_as_one_canary_pod_beside_the_untouched_stable_deployment() -> None:
    story = Story()
    step = story.decide(deployment=_settled("llava", "old-digest"), serving_pods=(STABLE_POD,))
    canary = step.apply["Deployment/canary"]
    assert "Deployment" not in step.apply  # the stable revision's Deployment is left as it is
    assert step.rendered_digest == "applied-old-digest"
    assert canary["spec"]["replicas"] == 1
    assert canary["spec"]["selector"]["matchLabels"][labels.TRACK] == labels.CANARY
    assert canary["spec"]["template"]["metadata"]["labels"][labels.TRACK] == labels.CANARY
    # The pods carry every label the Service selects: the canary takes its share of the requests.
    assert canary["metadata"]["annotations"][labels.TEMPLATE_DIGEST] == story.digest
    # After the write the reconcile looks again: the canary Deployment is there, its pod not yet.
    step = story.decide(
        deployment=_settled("llava", "old-digest"),
        canary=_settled("llava-canary", story.digest, available_replicas=0),
        serving_pods=(STABLE_POD,),
    )
    status = step.status
    assert status.phase == "Deploying" and status.rollout == "Canary starting"
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.reason == "CanaryAnalysis" and "runs once it is ready" in ready.message
    assert "CanaryStarted" in step.events


def test_a_canary_within_its_thresholds_is_promoted_then_removed_once_the_rest_rolled() -> None:
    story = Story()
    step = story.decide(reading=Reading(), **story.live())
    assert step.status.canary is not None and step.status.canary.ready_since == "2026-11-23T12:00:00Z"
    window = analysis_window(story.previous, story.live()["canary"], NOW + timedelta(seconds=45))
    assert window == 46
    midway = story.decide(now=NOW + timedelta(seconds=45), reading=_reading(), **story.live())
    assert midway.status.rollout == "Canary 45/60s"
    assert midway.status.canary is not None and midway.status.canary.verdict is CanaryVerdict.ANALYSING
    assert midway.status.canary.message == (
        f"analysing the canary of revision {story.digest} (pod llava-canary-cccc-1, Prometheus): 45 of 60 "
        "s, 20 requests, 0.0 % failed, mean latency 0.5 s (stable 0.5 s)"
    )
    rows = {row.role: row for row in midway.status.revisions or []}
    assert (rows["Canary"].share, rows["Stable"].share, rows["Canary"].revision) == (50, 50, "cccc")

    done = story.decide(now=NOW + timedelta(seconds=61), reading=_reading(), **story.live())
    assert done.status.canary is not None and done.status.canary.verdict is CanaryVerdict.PASSED
    assert "passed its 61 s analysis, within every threshold" in done.status.canary.message
    assert "CanaryPromoted" in done.events
    promoted = done.apply["Deployment"]  # the serving Deployment takes the canary's revision
    assert promoted["metadata"]["annotations"][labels.TEMPLATE_DIGEST] == story.digest
    assert "Deployment/canary" not in done.apply and done.delete == []

    rolling = {**story.live(), "deployment": _settled("llava", story.digest, status_replicas=2)}
    promoting = story.decide(now=NOW + timedelta(seconds=70), **rolling)
    assert promoting.status.rollout == "Promoting" and promoting.delete == []
    rolled = {**story.live(), "deployment": _settled("llava", story.digest)}
    finished = story.decide(now=NOW + timedelta(seconds=80), **rolled)
    assert finished.delete == ["llava-canary"]


def test_a_canary_that_fails_requests_is_rolled_back_with_its_figures_and_held() -> None:
    story = Story()
    story.decide(reading=Reading(), **story.live())
    failing = story.decide(now=NOW + timedelta(seconds=20), reading=_reading(failed=10), **story.live())
    status = failing.status
    assert status.phase == "Degraded" and status.rollout == ROLLED_BACK
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.reason == ROLLED_BACK
    assert ready.message == (
        f"the canary of revision {story.digest} (pod llava-canary-cccc-1) failed its analysis after 20 s: "
        "33.3 % of its 30 requests failed, more than spec.serving.rollout.canary.maxFailureRatio (5.0 %); "
        "the stable pods: 0.0 %. Rolled back: the canary is removed and revision aaaa keeps serving; apply a "
        f"fixed spec, or set the annotation {RETRY_ANNOTATION} to a new value to try this revision again"
    )
    assert status.rollback is not None and status.rollback.failed == story.digest
    # The canary goes on the next reconcile, a second later: the status holds the verdict first.
    assert failing.delete == [] and "Deployment" not in failing.apply
    assert "Deployment/canary" not in failing.apply and ROLLED_BACK in failing.events
    removed = story.decide(now=NOW + timedelta(seconds=21), **story.live())
    assert removed.delete == ["llava-canary"] and removed.status.rollback == status.rollback

    # Held: the same spec again changes nothing; the canary is not started again.
    held = story.decide(now=NOW + timedelta(seconds=40), deployment=_settled("llava", "old-digest"),
                        serving_pods=(STABLE_POD,))  # fmt: skip
    assert "Deployment/canary" not in held.apply and "Deployment" not in held.apply
    assert held.status.phase == "Degraded" and ROLLED_BACK not in held.events
    # The retry annotation starts a new analysis of the same revision.
    stable_only: dict[str, Any] = {
        "deployment": _settled("llava", "old-digest"),
        "serving_pods": (STABLE_POD,),
    }
    again = story.decide(now=NOW + timedelta(seconds=50), retry="1", **stable_only)
    assert "Deployment/canary" in again.apply
    again = story.decide(now=NOW + timedelta(seconds=51), retry="1", **story.live())
    assert again.status.canary is not None and again.status.canary.verdict is CanaryVerdict.ANALYSING


def test_a_slow_canary_is_rolled_back_on_its_latency_against_the_stable_pods() -> None:
    story = Story()
    story.decide(reading=Reading(), **story.live())
    slow = story.decide(now=NOW + timedelta(seconds=30), reading=_reading(latency=2.0), **story.live())
    ready = next(c for c in slow.status.conditions if c.type == "Ready")
    assert ready.reason == ROLLED_BACK
    assert "its mean request latency 2 s is 4.0 times the stable pods' 0.5 s, more than " in ready.message
    assert "spec.serving.rollout.canary.maxLatencyRatio (1.5)" in ready.message


def test_too_few_requests_are_not_judged_and_without_prometheus_readiness_alone_decides() -> None:
    story = Story()
    story.decide(reading=Reading(), **story.live())
    few = _reading(failed=5, answered=2)  # 5 of 7 failed, but fewer than minRequests
    quiet = story.decide(now=NOW + timedelta(seconds=61), reading=few, **story.live())
    assert quiet.status.canary is not None and quiet.status.canary.verdict is CanaryVerdict.PASSED
    assert "it answered 7 requests, fewer than spec.serving.rollout.canary.minRequests (10)" in (
        quiet.status.canary.message
    )

    # A canary pod gone at the end (evicted, say) is no pass: the analysis waits for one ready.
    gone = {**story.live(), "serving_pods": (STABLE_POD,)}
    waiting = Story()
    waiting.decide(reading=Reading(), **waiting.live())
    late = waiting.decide(now=NOW + timedelta(seconds=61), reading=_reading(), **gone)
    assert late.status.canary is not None and late.status.canary.verdict is CanaryVerdict.ANALYSING

    unwatched = Story()
    first = unwatched.decide(reading=None, **unwatched.live())
    assert first.status.canary is not None and first.status.canary.gate == "Readiness"
    passed = unwatched.decide(now=NOW + timedelta(seconds=60), reading=None, **unwatched.live())
    assert passed.status.canary is not None and passed.status.canary.verdict is CanaryVerdict.PASSED
    assert "ready at its end (no Prometheus URL is set, MMD_PROMETHEUS_URL: readiness alone judged it)" in (
        passed.status.canary.message
    )


def test_a_prometheus_that_does_not_answer_is_said_and_at_the_end_the_canary_is_rolled_back() -> None:
    story = Story()
    story.decide(reading=Reading(), **story.live())
    down = Reading(error="Prometheus at http://127.0.0.1:9 did not answer the analysis's query: refused")
    waiting = story.decide(now=NOW + timedelta(seconds=30), reading=down, **story.live())
    assert waiting.status.canary is not None and "(Prometheus at http://127.0.0.1:9" in (
        waiting.status.canary.message
    )
    assert waiting.status.canary.verdict is CanaryVerdict.ANALYSING
    ended = story.decide(now=NOW + timedelta(seconds=61), reading=down, **story.live())
    assert ended.status.rollback is not None
    assert "could not be judged: Prometheus at http://127.0.0.1:9" in ended.status.rollback.message


def test_the_analysis_resumes_from_the_status_in_another_operator() -> None:
    story = Story()
    story.decide(reading=Reading(), **story.live())
    shown = story.previous
    # A standby that takes over knows nothing but the status: the analysis goes on from the same start.
    standby = Story()
    standby.previous = shown
    resumed = standby.decide(now=NOW + timedelta(seconds=50), reading=_reading(), **standby.live())
    assert resumed.status.canary is not None and resumed.status.canary.ready_since == "2026-11-23T12:00:00Z"
    assert resumed.status.rollout == "Canary 50/60s" and "Deployment/canary" in resumed.apply


def test_the_queries_read_each_runtimes_counters_per_pod_over_the_window() -> None:
    triton = analysis_queries(Runtime.TRITON_TRTLLM_ENGINE, "ml", ("a", "b"), 45)
    entry_models = 'model=~"ensemble|tensorrt_llm_bls|whisper_bls"'
    failed = f'nv_inference_request_failure{{namespace="ml",pod=~"a|b",{entry_models}}}'
    # Exact counts: the counter less its value a window ago, or all of it for a pod younger than that.
    assert triton["failed"] == f"sum by (pod) ((({failed} - {failed} offset 45s) >= 0) or {failed})"
    serve = analysis_queries(Runtime.TRTLLM_SERVE, "ml", ("a",), MIN_WINDOW_SECONDS)
    assert set(serve) == {"answered", "latency"}  # trtllm-serve 1.2.1 counts no failures
    latency = 'trtllm_e2e_request_latency_seconds_sum{namespace="ml",pod=~"a"}'
    assert serve["latency"] == f"sum by (pod) ((({latency} - {latency} offset 30s) >= 0) or {latency})"


@pytest.fixture
def prometheus_api() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering /api/v1/query in Prometheus's format, per counter."""
    values = {"nv_inference_request_success": "40", "nv_inference_request_failure": "2",
              "nv_inference_request_duration_us": "8000000"}  # fmt: skip

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["query"][0]
            name = next(n for n in values if f"({n}{{" in query)
            body = {"status": "success", "data": {"resultType": "vector",
                    "result": [{"metric": {"pod": "p"}, "value": [0, values[name]]}]}}  # fmt: skip
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_reading_sums_prometheus_answers_per_pod_and_says_when_it_cannot(prometheus_api: str) -> None:
    reading = read_counts(prometheus_api, Runtime.TRITON_TRTLLM_ENGINE, "ml", ("p", "q"), 30)
    assert reading.error is None
    assert reading.counts["p"] == PodCounts(answered=40, failed=2, latency_seconds=8.0)
    assert reading.counts["q"] == PodCounts(answered=0, failed=0, latency_seconds=0)
    refused = read_counts("http://127.0.0.1:9", Runtime.TRTLLM_SERVE, "ml", ("p",), 30)
    assert refused.error is not None and refused.error.startswith(
        "Prometheus at http://127.0.0.1:9 did not answer the analysis's query"
    )


def test_the_rollout_column_says_surging_only_while_two_revisions_have_pods() -> None:
    story = Story(strategy="SurgeWhenPossible")
    rolling = _settled("llava", story.digest, replicas=1, status_replicas=2, updated_replicas=1)
    new_pod = _pod("llava-bbbb-1", "bbbb")
    surging = story.decide(deployment=rolling, serving_pods=(STABLE_POD, new_pod))
    assert surging.status.rollout == "Surging"
    scaling_up = _settled("llava", story.digest, replicas=2, status_replicas=2, updated_replicas=2)
    more = story.decide(deployment=scaling_up, serving_pods=(STABLE_POD, _pod("llava-aaaa-2", "aaaa")))
    assert more.status.rollout == "Stable" and more.status.canary is None
