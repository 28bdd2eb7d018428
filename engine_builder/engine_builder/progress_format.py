"""The progress a build or download Job writes into its log while it runs, and how it is read back.

A running Job has nowhere of its own to say how far it is, and the builder has no API client (nor the
permission to write an object): every `PROGRESS_SECONDS`, and at each build step, it prints one line
`mmd-progress {json}` on stdout, and the operator reads the last such line from the tail of the pod's
log. The log survives an operator restart and costs the API server one read per look.

A line says when it was written (`at`), when the work started, and when it last moved
(`last_progress_at`: a byte arrived, or the build step wrote output or began), on the pod's clock in
Unix seconds: work that has not moved for a while is stalled, whether its process still prints or not.
A download knows its totals from the Hub's file listing before its first byte. Reading never raises: a
line that is not one of these is skipped. Pure pydantic and the standard library; the operator may
import this module.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, TypeAdapter, ValidationError

from engine_builder.job_report import Frozen

PREFIX = "mmd-progress "
# How often a running Job says where it is, whether it moved or not.
PROGRESS_SECONDS = 10.0


class _Moment(Frozen):
    """What every progress line says: when it was written, when the work began, when it last moved."""

    at: float
    started_at: float
    last_progress_at: float


class DownloadProgress(_Moment):
    """How far a snapshot download is."""

    kind: Literal["download"] = "download"
    bytes_done: int = Field(ge=0)
    # None: the Hub listed a file without its size.
    bytes_total: int | None = Field(default=None, ge=0)
    files_done: int = Field(ge=0)
    files_total: int | None = Field(default=None, ge=0)
    # Over the last half minute; None until a few seconds of it were seen.
    bytes_per_second: float | None = Field(default=None, ge=0)


class BuildProgress(_Moment):
    """Which step of its plan a build runs."""

    kind: Literal["build"] = "build"
    step: int = Field(ge=1)
    steps: int = Field(ge=1)
    step_name: str
    step_started_at: float


Progress = Annotated[DownloadProgress | BuildProgress, Field(discriminator="kind")]
_PROGRESS: TypeAdapter[DownloadProgress | BuildProgress] = TypeAdapter(Progress)


def progress_line(progress: DownloadProgress | BuildProgress) -> str:
    """The log line that carries `progress`."""
    return PREFIX + progress.model_dump_json()


def last_progress(log_tail: str) -> DownloadProgress | BuildProgress | None:
    """The last progress line in `log_tail`; None when there is none."""
    # Only a line that starts with the prefix: a build step's own output is indented in the log.
    for line in reversed(log_tail.splitlines()):
        if not line.startswith(PREFIX):
            continue
        try:
            return _PROGRESS.validate_json(line[len(PREFIX) :])
        except ValidationError:
            continue
    return None
