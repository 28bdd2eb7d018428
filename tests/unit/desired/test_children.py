"""`mmctl render` writes exactly what the operator applies: for every example, the objects `manifests` builds
equal (kind, name and digest) the union of what `desired_state` applies in two worlds, before anything
exists and once the artifact is ready. Both build from the runtime's one list of children."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engine_builder.weights_format import weights_key
from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.config import OperatorConfig
from mmd_operator.desired.decision import desired_state, manifests
from mmd_operator.facts import ClaimFacts, Meta, Observed
from mmd_operator.judgement import judge
from mmd_operator.plan.resource_plan import AnyPlan
from mmd_operator.plan.triton import TritonPlan
from mmd_operator.vocabulary import hashing, names
from tests.support.builds import summary
from tests.support.downloads import succeeded
from tests.support.examples import ALL_EXAMPLE_PATHS, plan_any_example

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
CONFIG = OperatorConfig()
Applied = dict[tuple[str, str], str | None]


def _resource(path: Path) -> tuple[MultimodalDeployment, AnyPlan]:
    resource, plan = plan_any_example(path)
    metadata = {**resource.metadata, "namespace": "ml", "uid": "uid-1", "generation": 1}
    return resource.model_copy(update={"metadata": metadata}), plan


def _applied(resource: MultimodalDeployment, plan: AnyPlan, observed: Observed) -> Applied:
    judged = judge(plan, observed, None, 1, resource.spec)
    decision = desired_state(resource, plan, observed, judged, config=CONFIG)
    return {(m["kind"], m["metadata"]["name"]): hashing.applied_hash(m) for m in decision.apply}


def _artifact(plan: AnyPlan) -> Any:
    """The index's entry of `plan`'s artifact, made (its snapshot where the spec's commit says)."""
    if isinstance(plan, TritonPlan):
        return summary(plan.cache_key)
    if plan.download is None:
        return None  # a PersistentVolumeClaim source: nothing to make
    done = succeeded(plan.download.repo, plan.download.revision)
    location = plan.artifact_location or weights_key(done.repo, done.commit)
    return done.model_copy(update={"snapshot_key": location})


@pytest.mark.parametrize("path", ALL_EXAMPLE_PATHS, ids=lambda p: p.stem)
def test_render_writes_the_objects_the_operator_applies(path: Path) -> None:
    resource, plan = _resource(path)
    rendered = {
        (m["kind"], m["metadata"]["name"]): hashing.applied_hash(m)
        for m in manifests(resource, plan, config=CONFIG)
    }
    nothing_yet = _applied(resource, plan, Observed(now=NOW))
    claim = ClaimFacts(meta=Meta(name=CONFIG.engine_cache_claim), phase="Bound", managed=True)
    ready = _applied(resource, plan, Observed(now=NOW, claim=claim, artifact=_artifact(plan)))
    applied = {**nothing_yet, **ready}
    assert set(applied) == set(rendered)
    # The Deployment of a branch's snapshot names it only once the Job has resolved the branch.
    branch = not isinstance(plan, TritonPlan) and plan.download is not None and plan.artifact_location is None
    differing = {key for key in rendered if rendered[key] != applied[key]}
    workload = next(key for key in rendered if key[0] in ("Deployment", "LeaderWorkerSet"))
    instance = str(resource.metadata["name"])
    assert workload[1] == (names.group_set(instance) if workload[0] == "LeaderWorkerSet" else instance)
    assert differing == ({workload} if branch else set())
