"""What one reconcile judges of a resource's world, once, for the decision and the status alike.

`judge` reads the observed facts: where the engine is (ready, building, failed, to be retried, a success
to record), or on trtllm-serve where the weights are (`weights`), and whether the build or download is
blocked on a missing reference. `desired` decides what to write from
the judgement; `status` reports it. `Rendered` is what the decision built that the status reports on.
Whether serving is available (`serving.serving_state`) is judged here too, after the writes.

Pure: imports the api models, the facts and placement.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_builder.weights_format import DownloadPlan, DownloadSucceeded
from mmd_operator.api.v1alpha1 import MultimodalDeploymentStatus
from mmd_operator.facts import Observed
from mmd_operator.judgement.engine import EngineState, engine_state
from mmd_operator.judgement.placement import GpuDemand
from mmd_operator.judgement.weights import weights_state


@dataclass(frozen=True)
class Judgement:
    """The engine of the resource's cacheKey, and whether its build waits on a missing reference."""

    engine: EngineState
    # A Secret or source claim the build needs is missing: nothing is created until it appears.
    blocked: bool


def judge(
    cache_key: str,
    observed: Observed,
    previous: MultimodalDeploymentStatus | None,
    generation: int,
    build: GpuDemand,
    *,
    serve: bool = False,
    download: DownloadPlan | None = None,
) -> Judgement:
    """Judge the world `observed` for the plan with `cache_key`.

    `previous` is the last status written, `build` what the build pod asks of the scheduler. With `serve`
    (the trtllm-serve runtime) the "engine" is the weights of `download` (None: a PersistentVolumeClaim
    source).
    """
    if serve:
        engine = weights_state(download, observed, previous, generation)
    else:
        engine = engine_state(cache_key, observed, previous, generation, build)
    blocked = bool(observed.missing) and not engine.ready and observed.job is None
    return Judgement(engine=engine, blocked=blocked)


@dataclass(frozen=True)
class Rendered:
    """What the decision built that the status reports on: the repository ConfigMap and the Deployment."""

    repository: str
    repository_size: int
    # Over the ConfigMap size limit: not applied.
    too_large: bool
    # The digests their manifests carry once applied (None: no Deployment is wanted yet).
    repository_digest: str
    deployment_digest: str | None


def snapshot_key(observed: Observed, judgement: Judgement) -> str | None:
    """The snapshot a trtllm-serve resource serves: the index's, or the one its download just reported."""
    if observed.weights is not None:
        return observed.weights.snapshot_key
    record = judgement.engine.record
    return record.snapshot_key if isinstance(record, DownloadSucceeded) else None
