"""Whole reconciles on the in-memory API server: what the operator writes for every example, and what not.

Each example is created as a user applies it, reconciled, its artifact's Job ended as the Job controller
and kubelet end it (one pod reporting the artifact), and reconciled again: the manifests applied over
both passes are `mmctl render`'s (`desired.decision.manifests`), by kind, name and digest, and live with
those digests; besides them only the status, the engine index and (for a replica across pods) its SSH
Secret are written. Another pass then writes nothing. A spec the API server admits and the plan refuses
writes its status alone. An engine resource's status says once that its runtime is frozen upstream. A
shared Job or claim whose first user moves on passes to a user that has not joined it yet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from engine_builder import result_format, weights_format
from mmd_operator.config import OperatorConfig
from mmd_operator.desired.decision import manifests
from mmd_operator.knowledge import ModelType, Runtime
from mmd_operator.knowledge.engine_path import WAYS_OFF
from mmd_operator.plan.resource_plan import AnyPlan, plan_resource
from mmd_operator.reconcile import Reconciler
from mmd_operator.status.report import FROZEN
from mmd_operator.vocabulary import hashing, kinds, labels
from tests.support import bad_inputs
from tests.support.builds import summary
from tests.support.downloads import succeeded
from tests.support.examples import ALL_EXAMPLE_PATHS, EXAMPLES_DIR
from tests.support.in_memory_api import Request
from tests.support.in_memory_cluster import InMemoryCluster, the_operators_writes

NS = "ml"
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
CONFIG = OperatorConfig()
APPLY = "application/apply-patch+yaml"
LLAVA = EXAMPLES_DIR / "llava.yaml"
# What each runtime's Job reports when it made the plan's artifact.
REPORTS: Mapping[Runtime, Callable[[Any], str]] = MappingProxyType(
    {
        Runtime.TRITON_TRTLLM_ENGINE: lambda plan: result_format.termination_message(summary(plan.cache_key)),
        Runtime.TRTLLM_SERVE: lambda plan: weights_format.termination_message(
            succeeded(plan.download.repo, plan.download.revision)
        ),
    }
)


def prerequisites(cluster: InMemoryCluster, document: Mapping[str, Any]) -> None:
    """The Secret and claims the spec names, as the user creates them before the resource."""
    model = document["spec"]["model"]
    token = (model["source"].get("huggingface") or {}).get("tokenSecretRef")
    if token is not None:
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": token["name"], "namespace": NS}}
        cluster.create({**secret, "stringData": {token["key"]: "hf_not_a_real_token"}})
    for source in (model["source"], (model.get("lora") or {}).get("source") or {}):
        if "pvc" in source:
            claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim"}
            metadata = {"name": source["pvc"]["claimName"], "namespace": NS}
            cluster.create({**claim, "metadata": metadata, "spec": {"accessModes": ["ReadWriteMany"]}})


def applied(writes: list[Request]) -> dict[tuple[str, str], str | None]:
    """The digests of what the operator applied or created (not its status nor the hand-over), by kind, name.

    A create (POST) is a group's SSH Secret, made once and never applied again.
    """
    return {
        (request.body["kind"], request.body["metadata"]["name"]): hashing.applied_hash(request.body)
        for request in writes
        if (request.content_type == APPLY or request.method == "POST")
        and request.query.get("fieldManager") == CONFIG.field_manager
        and not request.path.endswith("/status")
    }


@pytest.fixture
def cluster() -> InMemoryCluster:
    return InMemoryCluster()


@pytest.fixture
def reconciler(cluster: InMemoryCluster) -> Any:
    running = Reconciler(cluster.client, cluster.store, CONFIG, clock=lambda: NOW)
    yield running
    running.events.close()


def reconcile(cluster: InMemoryCluster, reconciler: Reconciler, name: str) -> Any:
    """One reconcile, then the watch events its writes brought, fed into the cache."""
    outcome = reconciler.reconcile(NS, name)
    cluster.feed()
    return outcome


@pytest.mark.parametrize("path", ALL_EXAMPLE_PATHS, ids=lambda path: path.stem)
def test_every_example_writes_what_mmctl_render_shows_and_then_nothing(
    path: Path, cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    document = yaml.safe_load(path.read_text())
    document["metadata"]["namespace"] = NS
    name = document["metadata"]["name"]
    prerequisites(cluster, document)
    resource, plan = plan_resource(cluster.create(document))
    cluster.feed()
    start = len(cluster.server.requests)

    reconcile(cluster, reconciler, name)
    for job in cluster.server.all(kinds.JOB, NS):
        cluster.finish_job(NS, job["metadata"]["name"], REPORTS[plan.runtime](plan))
    cluster.feed()
    reconcile(cluster, reconciler, name)

    rendered = {
        (m["kind"], m["metadata"]["name"]): hashing.applied_hash(m)
        for m in manifests(resource, plan, config=CONFIG)
    }
    written = the_operators_writes(cluster, start)
    made = applied(written)
    groups = any(kind == kinds.LEADER_WORKER_SET.kind for kind, _ in rendered)
    secrets = {key for key in made if key[0] == kinds.SECRET.kind}
    assert len(secrets) == (1 if groups else 0), "a group's SSH Secret, which render does not show"
    assert set(made) - secrets == set(rendered)
    differing = {key for key in rendered if rendered[key] != made[key]}
    assert differing == (_branch_workload(rendered) if _branch(plan) else set())
    for (kind, child), digest in made.items():
        found = cluster.server.get(next(k for k in kinds.ALL if k.kind == kind), NS, child)
        assert found is not None and (kind == "Secret" or hashing.applied_hash(found) == digest)
    others = {
        (r.method, r.path.rsplit("/", 1)[-1])
        for r in written
        if (r.content_type != APPLY and r.method != "POST") or "/status" in r.path
    }
    index = f"{CONFIG.engine_cache_claim}-index"
    assert others <= {("PATCH", "status"), ("PATCH", index), ("POST", "configmaps")}
    assert ("PATCH", "status") in others

    settled = len(cluster.server.requests)
    outcome = reconcile(cluster, reconciler, name)
    reconcile(cluster, reconciler, name)
    assert the_operators_writes(cluster, settled) == [] and outcome.writes == 0
    status = cluster.server.get(kinds.MULTIMODAL_DEPLOYMENT, NS, name)
    assert status is not None and status["status"]["observedGeneration"] == 1
    # The engine runtime's end upstream, once, in a condition that a second pass left as it was.
    frozen = [c for c in status["status"]["conditions"] if c["type"] == FROZEN]
    if plan.runtime is Runtime.TRTLLM_SERVE:
        assert frozen == []
    else:
        (condition,) = frozen
        way = WAYS_OFF[ModelType(document["spec"]["model"]["type"])]
        assert condition["status"] == "True" and "frozen upstream" in condition["message"]
        assert ("mmctl migrate" in condition["message"]) == way.to_serve, condition["message"]


def _branch(plan: AnyPlan) -> bool:
    """A trtllm-serve download of a branch: render cannot know the commit its Job resolves."""
    download = getattr(plan, "download", None)
    return download is not None and plan.artifact_location is None


def _branch_workload(rendered: Mapping[tuple[str, str], Any]) -> set[tuple[str, str]]:
    return {key for key in rendered if key[0] in (kinds.DEPLOYMENT.kind, kinds.LEADER_WORKER_SET.kind)}


INVALID = [case for case in bad_inputs.CASES if case.outcome == bad_inputs.INVALID]


@pytest.mark.parametrize("case", INVALID, ids=lambda case: case.id)
def test_an_invalid_spec_writes_its_status_alone(
    case: bad_inputs.BadInput, cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    document = {**case.document, "metadata": {**case.document["metadata"], "namespace": NS}}
    cluster.create(document)
    cluster.feed()
    start = len(cluster.server.requests)
    outcome = reconcile(cluster, reconciler, case.name)
    (status,) = the_operators_writes(cluster, start)
    assert status.path.endswith(f"/{case.name}/status") and status.content_type == APPLY
    reported = status.body["status"]
    ready = next(c for c in reported["conditions"] if c["type"] == "Ready")
    assert (
        reported["phase"] == "Failed" and ready["reason"] == "InvalidSpec" and case.path in ready["message"]
    )
    assert outcome.writes == 1
    children = [
        obj
        for kind in kinds.ALL
        if kind not in (kinds.MULTIMODAL_DEPLOYMENT, kinds.EVENT)
        for obj in cluster.server.all(kind, NS)
        if (obj["metadata"].get("labels") or {}).get(labels.MANAGED_BY) == labels.OPERATOR
    ]
    assert children == []
    settled = len(cluster.server.requests)
    reconcile(cluster, reconciler, case.name)
    assert the_operators_writes(cluster, settled) == []


def test_a_build_whose_first_user_moves_on_passes_to_a_user_whose_reconcile_is_still_queued(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    """Two resources want one engine; the first is reconciled, creates the build and moves to another
    engine before the second's reconcile ran: the build passes to the second, and is never made twice."""
    document = yaml.safe_load(LLAVA.read_text())
    for name in ("first", "second"):
        cluster.create({**document, "metadata": {"name": name, "namespace": NS}})
    cluster.feed()
    reconcile(cluster, reconciler, "first")
    (shared,) = cluster.server.all(kinds.JOB, NS)
    moved = {**document["spec"], "engine": {**document["spec"].get("engine", {}), "maxBatchSize": 3}}
    cluster.create({**document, "metadata": {"name": "first", "namespace": NS}, "spec": moved})
    cluster.feed()
    reconcile(cluster, reconciler, "first")
    reconcile(cluster, reconciler, "second")
    jobs = {job["metadata"]["name"]: job for job in cluster.server.all(kinds.JOB, NS)}
    kept = jobs.get(shared["metadata"]["name"])
    assert kept is not None and kept["metadata"]["uid"] == shared["metadata"]["uid"], (
        "the build was made again"
    )
    assert [o["name"] for o in kept["metadata"]["ownerReferences"]] == ["second"]
    assert len(jobs) == 2, f"one build per engine: {sorted(jobs)}"
    job_writes = [r for r in cluster.server.writes() if "/jobs/" in r.path]
    assert len([r for r in job_writes if r.content_type == APPLY]) == 2, "each build applied once"
    assert not [r for r in job_writes if r.method == "DELETE"]


def test_a_cache_claim_whose_first_user_moves_on_passes_to_a_user_whose_reconcile_is_still_queued(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    """A claim made to go with its last user (retention Delete) is not deleted, engines and all, while a
    resource that names it has not joined it yet."""
    document = yaml.safe_load(LLAVA.read_text())
    shared = {**document["spec"], "engineCache": {"claimName": "engines", "retention": "Delete"}}
    for name in ("first", "second"):
        cluster.create({**document, "metadata": {"name": name, "namespace": NS}, "spec": shared})
    cluster.feed()
    reconcile(cluster, reconciler, "first")
    made = cluster.server.get(kinds.CLAIM, NS, "engines")
    assert made is not None
    moved = {**shared, "engineCache": {"claimName": "other-engines", "retention": "Delete"}}
    cluster.create({**document, "metadata": {"name": "first", "namespace": NS}, "spec": moved})
    cluster.feed()
    reconcile(cluster, reconciler, "first")
    kept = cluster.server.get(kinds.CLAIM, NS, "engines")
    assert kept is not None and kept["metadata"]["uid"] == made["metadata"]["uid"]
    assert [o["name"] for o in kept["metadata"]["ownerReferences"]] == ["second"]
    reconcile(cluster, reconciler, "second")
    assert cluster.server.get(kinds.CLAIM, NS, "engines")["metadata"]["uid"] == made["metadata"]["uid"]
