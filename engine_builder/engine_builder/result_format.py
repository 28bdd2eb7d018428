"""What a build leaves behind and reports: the manifest and the termination message.

`manifest.json`, written last into `<cache dir>/<cacheKey>/`, describes one finished cache entry: the plan,
the versions and GPU it was built with, every file's size and sha256, each step's duration.

The termination message is one JSON line the build Job leaves in `/dev/termination-log` (`job_report`'s
protocol, shared with the weights download): a short summary on success (cacheKey, versions, sizes), the
reason on failure (step, exit code, last error line). The operator reads it from the pod status with
`parse_termination_message` and records successes in its own engine index, so that later resources with
the same cacheKey are cache hits without a Job.

Pure pydantic and standard library; imports the plan format and `job_report`. The operator may import
this module.
"""

from __future__ import annotations

from typing import Literal

from engine_builder.job_report import FileRecord, JobFailed, JobReports, JobSucceeded
from engine_builder.job_report import Frozen as _Frozen
from engine_builder.plan_format import BuildPlan

RESULT_FORMAT_VERSION = 1
UNKNOWN = "unknown"


class Versions(_Frozen):
    """The software an engine was built with; engines load only in a server with the same TensorRT-LLM."""

    tensorrt_llm: str
    tensorrt: str = UNKNOWN
    cuda: str = UNKNOWN
    # True when tensorrt_llm was not installed and its version was taken from the environment (tests).
    tensorrt_llm_assumed: bool = False


class Gpu(_Frozen):
    """The GPU a build ran on (TensorRT engines are specific to its compute capability)."""

    name: str = UNKNOWN
    compute_capability: str = UNKNOWN
    count: int = 0


class StepRecord(_Frozen):
    """How long one step of the plan took."""

    name: str
    seconds: float


class Manifest(_Frozen):
    """The last file written into a cache entry; its presence with matching files means complete."""

    format_version: int = RESULT_FORMAT_VERSION
    cache_key: str
    plan: BuildPlan
    versions: Versions
    gpu: Gpu
    # Paths relative to the entry, `/`-separated; manifest.json itself is not listed.
    files: dict[str, FileRecord]
    steps: tuple[StepRecord, ...]
    created: str

    def sizes(self) -> dict[str, int]:
        """Bytes per top-level directory of the entry (`llm`, `encoder`, ...)."""
        sizes: dict[str, int] = {}
        for path, record in self.files.items():
            top = path.split("/", 1)[0]
            sizes[top] = sizes.get(top, 0) + record.size
        return dict(sorted(sizes.items()))


class BuildSucceeded(JobSucceeded):
    """The success summary: what the operator records about a finished cache entry."""

    result: Literal["succeeded"] = "succeeded"
    format_version: int = RESULT_FORMAT_VERSION
    cache_key: str
    versions: Versions
    gpu: Gpu
    # Bytes per top-level directory of the entry.
    sizes: dict[str, int]

    @classmethod
    def from_manifest(cls, manifest: Manifest, *, cache_hit: bool, seconds: float) -> BuildSucceeded:
        """Summarise `manifest`; `seconds` is how long this run took (not the original build)."""
        sizes = manifest.sizes()
        return cls(
            cache_key=manifest.cache_key,
            cache_hit=cache_hit,
            versions=manifest.versions,
            gpu=manifest.gpu,
            total_bytes=sum(sizes.values()),
            sizes=sizes,
            seconds=round(seconds, 1),
        )


class BuildFailed(JobFailed):
    """Why a build failed; `reason` is the one line a person reads (in the condition message)."""

    format_version: int = RESULT_FORMAT_VERSION
    cache_key: str | None = None


# The one JSON line of a result for `/dev/termination-log`, and its reading back (`job_report`).
REPORTS = JobReports.of(BuildSucceeded, BuildFailed, "the build container left no termination message")
termination_message = REPORTS.message
parse_termination_message = REPORTS.parse
