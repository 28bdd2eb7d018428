"""The build plan: the one contract between the operator (which writes it) and the build Job (which runs it).

A plan is an ordered list of steps, each an exact argv, plus what the finished engines must look like.
Paths in argv are absolute, except those under the build's private work directory, which start with
`WORK_DIR` and are resolved by the builder. Pure pydantic; imports nothing of ours.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# 2: an expectation's value may be a bool (a builder that reads 1 would take `true` for 1 and then fail).
PLAN_FORMAT_VERSION = 2

# Stands for the temporary directory the builder works in; renamed to `<cache dir>/<cacheKey>` when done.
WORK_DIR = "{work}"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BuildStep(_Frozen):
    """One command of the build."""

    name: str = Field(pattern=r"^[a-z0-9-]+$")
    description: str
    argv: tuple[str, ...] = Field(min_length=1)
    # Paths (relative to the work directory) that must exist after the step succeeded.
    produces: tuple[str, ...] = ()
    # Environment variables the step needs from the Job (names only; values never enter the plan).
    env_from_job: tuple[str, ...] = ()


class EngineExpectation(_Frozen):
    """Values the engine's own `config.json` must show after the build.

    Keys are dotted paths into that file (e.g. `build_config.max_batch_size`).
    """

    config_path: str
    # bool first: pydantic's smart union keeps a JSON true a bool, and check_engines compares types.
    values: dict[str, bool | int | str]


class BuildPlan(_Frozen):
    """Everything the build Job needs to produce the engines for one cacheKey."""

    format_version: int = PLAN_FORMAT_VERSION
    cache_key: str
    model_type: str
    trtllm_version: str
    builder_image: str
    steps: tuple[BuildStep, ...]
    # Directories (relative to the work directory) kept in the cache; intermediates are removed.
    keep: tuple[str, ...]
    expectations: tuple[EngineExpectation, ...] = ()
