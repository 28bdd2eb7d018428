"""What a build leaves behind and reports: the manifest and the termination message.

`manifest.json`, written last into `<cache dir>/<cacheKey>/`, describes one finished cache entry: the plan,
the versions and GPU it was built with, every file's size and sha256, each step's duration.

The termination message is one JSON line the build Job leaves in `/dev/termination-log`: a short summary
on success (cacheKey, versions, sizes), the reason on failure (step, exit code, last error line). The
operator reads it from the pod status without mounting the volume, parses it with
`parse_termination_message`, and records successes in its own engine index so that later resources with
the same cacheKey are cache hits without a Job.

Pure pydantic and standard library; imports nothing of ours but the plan format. The operator may import
this module.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from engine_builder.plan_format import BuildPlan

RESULT_FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
UNKNOWN = "unknown"
# Kubernetes keeps at most 4096 bytes of a termination message.
TERMINATION_MESSAGE_LIMIT = 4096
# A failure reason is clipped to this many characters, so a message stays near 2 KiB even in 4-byte UTF-8.
REASON_LIMIT = 480


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


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


class FileRecord(_Frozen):
    """One file of a cache entry."""

    size: int
    sha256: str


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


class BuildSucceeded(_Frozen):
    """The success summary: what the operator records about a finished cache entry."""

    result: Literal["succeeded"] = "succeeded"
    format_version: int = RESULT_FORMAT_VERSION
    cache_key: str
    cache_hit: bool
    versions: Versions
    gpu: Gpu
    total_bytes: int
    sizes: dict[str, int]
    seconds: float

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


class BuildFailed(_Frozen):
    """Why a build failed; `reason` is the one line a person reads (in the condition message)."""

    result: Literal["failed"] = "failed"
    format_version: int = RESULT_FORMAT_VERSION
    cache_key: str | None = None
    step: str | None = None
    exit_code: int | None = None
    reason: str


BuildResult = Annotated[BuildSucceeded | BuildFailed, Field(discriminator="result")]
_RESULT: TypeAdapter[BuildSucceeded | BuildFailed] = TypeAdapter(BuildResult)


def termination_message(result: BuildSucceeded | BuildFailed) -> str:
    """The one JSON line for `/dev/termination-log`, always well below Kubernetes' 4096-byte limit."""
    if isinstance(result, BuildFailed) and len(result.reason) > REASON_LIMIT:
        result = result.model_copy(update={"reason": result.reason[: REASON_LIMIT - 1] + "…"})
    return result.model_dump_json()


def parse_termination_message(text: str | None) -> BuildSucceeded | BuildFailed:
    """Read a build container's termination message; never raises.

    The last line that is one of our results wins. Anything else (an empty message, a crash's log tail
    under `terminationMessagePolicy: FallbackToLogsOnError`) becomes a failure whose reason is the last
    non-empty line, so the condition message still says something true.
    """
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    for line in reversed(lines):
        try:
            return _RESULT.validate_json(line)
        except ValidationError:
            continue
    reason = lines[-1][:REASON_LIMIT] if lines else "the build container left no termination message"
    return BuildFailed(reason=reason)
