"""The kube adapter reads a running Job pod's log tail for its last progress line, and only then."""

from __future__ import annotations

from datetime import UTC, datetime

from engine_builder.progress_format import DownloadProgress, progress_line
from mmd_operator.facts import JobFacts, Meta, PodFacts, PodPhase
from mmd_operator.kube.observe import job_progress
from tests.support.api_answerer import Server, make_client

LINE = DownloadProgress(
    at=30.0,
    started_at=0.0,
    last_progress_at=30.0,
    bytes_done=10,
    bytes_total=100,
    files_done=1,
    files_total=4,
)
JOB = JobFacts(meta=Meta(name="download-abc"))


def pod(name: str, phase: PodPhase = PodPhase.RUNNING, minute: int = 0) -> PodFacts:
    return PodFacts(meta=Meta(name=name, created=datetime(2026, 11, 28, 8, minute, tzinfo=UTC)), phase=phase)


def test_the_newest_running_pods_tail_is_read_and_its_last_progress_line_taken(server: Server) -> None:
    older = LINE.model_copy(update={"bytes_done": 5})
    server.answers["/pods/download-abc-2/log"] = (
        200,
        "\n".join([progress_line(older), "  a step's output", progress_line(LINE), "fetching config.json"]),
    )
    pods = (pod("download-abc-1", PodPhase.FAILED), pod("download-abc-2", minute=1), pod("download-abc-0"))
    assert job_progress(make_client(server.url), "ns", JOB, pods) == LINE
    (seen,) = server.seen
    assert seen.method == "GET"
    assert seen.path == "/api/v1/namespaces/ns/pods/download-abc-2/log?tailLines=200&limitBytes=65536"
    assert seen.headers["Accept"] == "application/json, */*"  # the API server refuses text/plain alone


def test_nothing_is_asked_of_a_job_that_ended_or_has_no_running_pod(server: Server) -> None:
    client = make_client(server.url)
    assert job_progress(client, "ns", JobFacts(meta=JOB.meta, succeeded=True), (pod("p"),)) is None
    assert job_progress(client, "ns", JOB, (pod("p", PodPhase.PENDING),)) is None
    assert job_progress(client, "ns", None, ()) is None
    assert server.seen == []


def test_a_pod_that_is_gone_or_a_log_the_operator_may_not_read_gives_no_progress(server: Server) -> None:
    client = make_client(server.url)
    server.answers["/pods/gone/log"] = (404, {"kind": "Status", "reason": "NotFound", "code": 404})
    server.answers["/pods/forbidden/log"] = (403, {"kind": "Status", "reason": "Forbidden", "code": 403})
    server.answers["/pods/quiet/log"] = (200, "starting\n")
    for name in ("gone", "forbidden", "quiet"):
        assert job_progress(client, "ns", JOB, (pod(name),)) is None
    assert len(server.seen) == 3
