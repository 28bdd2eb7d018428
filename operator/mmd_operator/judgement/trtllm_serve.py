"""The trtllm-serve runtime's artifact: the weights' snapshot, and the download Job that fetches it.

Ready means found in the index (the recorded resolution of the revision and the snapshot of its commit),
downloaded by the Job, or on the model.source.pvc claim, which needs nothing fetched. A failed download's
step and reason come from the download program's own termination message (`weights_format`) and reach
the WeightsReady condition verbatim: a revision that does not exist, a gated repository, an unreachable
Hub. The shared rules are `artifact`'s. Pure: imports the api models, the facts, the plan and the
builder's weights format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from engine_builder.weights_format import (
    DownloadPlan,
    DownloadSucceeded,
    parse_termination_message,
    weights_key,
)
from mmd_operator.api.v1alpha1 import MultimodalDeploymentStatus, WeightsSource, WeightsStatus
from mmd_operator.facts import JobFacts, Observed, PodFacts
from mmd_operator.judgement import artifact
from mmd_operator.judgement.placement import GpuDemand
from mmd_operator.plan.trtllm_serve import TrtllmServePlan

WEIGHTS_READY = "WeightsReady"
WORDS = artifact.JobWords(
    condition=WEIGHTS_READY, kind="download", program="download", artifact="weights", verb="downloading",
    making="the weights are downloading", again="downloads again",
    running="Downloading", pending="DownloadPending", failed="DownloadFailed",
    parse=parse_termination_message,
)  # fmt: skip
WeightsState = artifact.ArtifactState[DownloadSucceeded, WeightsSource]
# A PersistentVolumeClaim source: nothing to fetch.
_ON_VOLUME: WeightsState = artifact.ArtifactState(
    ready=True,
    reason=WeightsSource.VOLUME.value,
    message="served from the model.source.pvc claim: nothing to download",
    source=WeightsSource.VOLUME,
)


@dataclass(frozen=True)
class _Weights:
    """The rules of one resource's weights download."""

    words: ClassVar[artifact.JobWords] = WORDS

    download: DownloadPlan
    previous: MultimodalDeploymentStatus | None

    @property
    def what(self) -> str:
        return f"{self.download.repo}@{self.download.revision}"

    def _previous(self) -> WeightsStatus | None:
        weights = self.previous.weights if self.previous is not None else None
        return weights if weights is not None and weights.download_key == self.download.key else None

    def known(self) -> tuple[str | None, int | None]:
        return artifact.previous_condition(self.previous, WORDS, self._previous() is not None)

    def ready(self, result: DownloadSucceeded, *, fresh: bool = True) -> WeightsState | None:
        # A Job's report of another plan's download (or a hand-made line) would record a resolution no
        # later lookup finds: it counts as no result. An index entry is found by its snapshot key, whatever
        # download (a branch's, its commit's) stored it.
        download = self.download
        same = (result.key, result.repo, result.revision) == (download.key, download.repo, download.revision)
        if fresh and (not same or result.snapshot_key != weights_key(result.repo, result.commit)):
            return None
        before = self._previous()
        reason, _ = self.known()
        source = artifact.source_of(
            before.source if before else None,
            fresh or reason is not None,
            made=WeightsSource.DOWNLOADED,
            found=WeightsSource.CACHE_HIT,
        )
        size = f"{result.total_bytes / 1e9:.1f} GB"
        where = (
            "found in the engine cache"
            if source is WeightsSource.CACHE_HIT
            else f"downloaded in {result.seconds:.0f} s"
        )
        return artifact.ArtifactState(
            ready=True,
            reason=source.value,
            message=f"{self.what} is commit {result.commit}: snapshot {result.snapshot_key} {where} "
            f"({result.files} files, {size})",
            source=source,
            record=result if fresh else None,
            location=result.snapshot_key,
        )

    def mismatch(self, job: JobFacts, result: DownloadSucceeded) -> str | None:
        # A report of another download is no result of this one.
        return None

    def unplaced(self, pod: PodFacts) -> WeightsState:
        message = f"download pod {pod.meta.name} cannot be scheduled: {pod.unschedulable}"
        return artifact.not_ready(
            WORDS.pending, message, f"{message}: check spec.build.pod (node selector, tolerations)."
        )


def weights_state(
    plan: TrtllmServePlan,
    observed: Observed,
    previous: MultimodalDeploymentStatus | None,
    generation: int,
    demand: GpuDemand,
) -> artifact.ArtifactState[Any, Any]:
    """The state of `plan`'s weights as `observed` (`demand`, the build pod's GPUs, does not apply)."""
    del demand  # the download pod asks for no GPU
    if plan.download is None:
        # A PersistentVolumeClaim source: nothing to fetch, unless the claim itself is missing.
        return artifact.missing_state(observed) or _ON_VOLUME
    rules = _Weights(plan.download, previous)
    indexed = observed.artifact if isinstance(observed.artifact, DownloadSucceeded) else None
    found = rules.ready(indexed, fresh=False) if indexed is not None else None
    return artifact.artifact_state(rules, observed, found, rules.known(), generation)
