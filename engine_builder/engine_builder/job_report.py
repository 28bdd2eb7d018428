"""What both Jobs of the builder share in their formats: the termination-message protocol and the manifest.

A build Job (`result_format`) and a weights download Job (`weights_format`) each report in one way: one
JSON line left in `/dev/termination-log`, which Kubernetes copies into the pod status (at most 4096
bytes), where the operator reads it without mounting the volume. A failure's reason is clipped so that a
message stays near 2 KiB even in 4-byte UTF-8. `JobReports` writes and reads those lines for each kind
of Job; reading never raises: the last line that is one of the format's results wins, and anything else
(an empty message, a crash's log tail under `terminationMessagePolicy: FallbackToLogsOnError`) becomes a
failure whose reason is the last non-empty line, so the condition message still says something true.

Each kind of cache entry ends with `manifest.json`, written last, listing every file with its size and
sha256 (`FileRecord`). Pure pydantic and the standard library; the operator may import this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

MANIFEST_NAME = "manifest.json"
# Kubernetes keeps at most 4096 bytes of a termination message.
TERMINATION_MESSAGE_LIMIT = 4096
# A failure reason is clipped to this many characters, so a message stays near 2 KiB even in 4-byte UTF-8.
REASON_LIMIT = 480


class Frozen(BaseModel):
    """A format's model: immutable, and refusing fields it does not know."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class FileRecord(Frozen):
    """One file of a cache entry."""

    size: int
    sha256: str


class JobSucceeded(Frozen):
    """What every Job's success reports besides what it made: its size, its time, whether it was there."""

    total_bytes: int
    # How long this run took (not the original build or download, for one found complete).
    seconds: float
    # True when the entry was complete already (another Job, an earlier run): nothing was made.
    cache_hit: bool = False


class JobFailed(Frozen):
    """Why a Job failed; `reason` is the one line a person reads (in the condition message)."""

    result: Literal["failed"] = "failed"
    # The program's step that failed; None: the program died before it reported one.
    step: str | None = None
    exit_code: int | None = None
    reason: str


Success = TypeVar("Success", bound=Frozen)
Failed = TypeVar("Failed", bound=JobFailed)


def clip(reason: str) -> str:
    """`reason` cut to `REASON_LIMIT` characters, with an ellipsis when it was longer."""
    return reason if len(reason) <= REASON_LIMIT else reason[: REASON_LIMIT - 1] + "…"


@dataclass(frozen=True)
class JobReports(Generic[Success, Failed]):
    """The termination messages of one kind of Job: its success and its failure results."""

    results: TypeAdapter[Success | Failed]
    failed: type[Failed]
    # The reason of a failure made from an empty message.
    silent: str

    @classmethod
    def of(cls, succeeded: type[Success], failed: type[Failed], silent: str) -> JobReports[Success, Failed]:
        """The reports of a Job whose results are `succeeded` and `failed`, told apart by `result`."""
        union: Any = Annotated[Union[succeeded, failed], Field(discriminator="result")]  # noqa: UP007
        return cls(TypeAdapter(union), failed, silent)

    def message(self, result: Success | Failed) -> str:
        """The one JSON line of `result` for `/dev/termination-log`, well below Kubernetes' limit."""
        if isinstance(result, JobFailed) and len(result.reason) > REASON_LIMIT:
            result = result.model_copy(update={"reason": clip(result.reason)})
        return result.model_dump_json()

    def parse(self, text: str | None) -> Success | Failed:
        """Read a Job container's termination message; never raises.

        The last line that is one of the results wins; anything else becomes a failure whose reason is
        the message's last non-empty line (or `silent`).
        """
        lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
        for line in reversed(lines):
            try:
                return self.results.validate_json(line)
            except ValidationError:
                continue
        return self.failed(reason=lines[-1][:REASON_LIMIT] if lines else self.silent)
