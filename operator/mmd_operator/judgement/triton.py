"""The triton-trtllm-engine runtime's artifact: the engine of the plan's cacheKey, and its build Job.

Ready means found in the engine index, or reported built by the cacheKey's build pod. A failed build's
step and last error line come from the builder's own termination message (`result_format`) and reach the
EngineReady condition verbatim; a build pod the scheduler cannot place is described in the spec's fields
and GPU figures (`placement`). The shared rules are `artifact`'s. Pure: imports the api models, the
facts, the plan, placement and the builder's result format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from engine_builder.job_report import JobFailed
from engine_builder.result_format import BuildSucceeded, parse_termination_message
from mmd_operator.api.v1alpha1 import EngineSource, EngineStatus, MultimodalDeploymentStatus
from mmd_operator.facts import JobFacts, Observed, PodFacts
from mmd_operator.judgement.artifact import (
    ArtifactState,
    JobWords,
    artifact_state,
    finished_result,
    not_ready,
    previous_condition,
    source_of,
)
from mmd_operator.judgement.placement import GpuDemand, unschedulable
from mmd_operator.plan.triton import TritonPlan

ENGINE_READY = "EngineReady"
WORDS = JobWords(
    condition=ENGINE_READY, kind="build", program="builder", artifact="engine", verb="building",
    making="the engine is building", again="builds again",
    running="BuildRunning", pending="BuildPending", failed="BuildFailed", parse=parse_termination_message,
)  # fmt: skip
EngineState = ArtifactState[BuildSucceeded, EngineSource]


@dataclass(frozen=True)
class _Engine:
    """The rules of one resource's engine."""

    words: ClassVar[JobWords] = WORDS

    cache_key: str
    previous: MultimodalDeploymentStatus | None
    demand: GpuDemand
    observed: Observed

    @property
    def what(self) -> str:
        return f"engine {self.cache_key}"

    def _previous(self) -> EngineStatus | None:
        engine = self.previous.engine if self.previous is not None else None
        return engine if engine is not None and engine.cache_key == self.cache_key else None

    def known(self) -> tuple[str | None, int | None]:
        return previous_condition(self.previous, WORDS, self._previous() is not None)

    def ready(self, result: BuildSucceeded, *, record: bool = True) -> EngineState | None:
        if result.cache_key != self.cache_key:
            return None
        before = self._previous()
        reason, _ = self.known()
        source = source_of(
            before.source if before else None,
            reason is not None or record,
            made=EngineSource.BUILT,
            found=EngineSource.CACHE_HIT,
        )
        built = f"built in {result.seconds:.0f} s" if result.seconds else "built"
        size = f"{result.total_bytes / 1e9:.1f} GB"
        where = "found in the engine cache" if source is EngineSource.CACHE_HIT else built
        return ArtifactState(
            ready=True,
            reason=source.value,
            message=f"engine {self.cache_key} {where} ({size}, TensorRT-LLM {result.versions.tensorrt_llm})",
            source=source,
            record=result if record else None,
            location=self.cache_key,
        )

    def mismatch(self, job: JobFacts, result: BuildSucceeded) -> str | None:
        return f"the build Job {job.meta.name} reported cacheKey {result.cache_key}, not {self.cache_key}"

    def unplaced(self, pod: PodFacts) -> EngineState:
        unplaced = unschedulable(pod, self.demand, self.observed.nodes)
        return not_ready(unplaced.reason, unplaced.message, unplaced.summary)


def engine_state(
    plan: TritonPlan,
    observed: Observed,
    previous: MultimodalDeploymentStatus | None,
    generation: int,
    demand: GpuDemand,
) -> ArtifactState[Any, Any]:
    """The state of `plan`'s engine as `observed`.

    `previous` is the resource's last status, and `demand` what its build pod asks of the scheduler.
    """
    rules = _Engine(plan.cache_key, previous, demand, observed)
    indexed = observed.artifact if isinstance(observed.artifact, BuildSucceeded) else None
    found = rules.ready(indexed, record=False) if indexed is not None else None
    return artifact_state(rules, observed, found, rules.known(), generation)


def pod_result(pod: PodFacts) -> BuildSucceeded | JobFailed | None:
    """What a finished build pod reported, or None while it has not finished."""
    return finished_result(pod, parse_termination_message)
