"""Runs a build plan: every step in a private work directory on the cache volume, then one rename.

The cache directory (the engine cache volume) holds:

    <cacheKey>/             a finished entry: the plan's `keep` directories and manifest.json, written last
    .work-<cacheKey>/       the build in progress: `{work}` in the plan's argv and `produces`
    .lock-<cacheKey>        flock-ed by the one builder of that key; the kernel drops the lock when the
                            process dies, however it dies
    .trash-<cacheKey>.<n>/  an incomplete entry moved aside before it is deleted

An entry appears only by renaming a complete work directory, so a killed build leaves nothing that looks
complete, and the next builder of the key, holding the lock, removes whatever a dead one left. After the
steps, the engines' own `config.json` must show what the plan asked for. Imports the plan and result
formats, the probes and the standard library.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from engine_builder import versions as pinned
from engine_builder.job_report import MANIFEST_NAME, FileRecord, Frozen
from engine_builder.plan_format import PLAN_FORMAT_VERSION, WORK_DIR, BuildPlan, BuildStep
from engine_builder.probe import ASSUME_TRTLLM_VERSION_ENV
from engine_builder.progress import BuildMeter, beating
from engine_builder.result_format import (
    UNKNOWN,
    BuildSucceeded,
    Gpu,
    Manifest,
    StepRecord,
    Versions,
)

Log = Callable[[str], None]
EntryManifest = TypeVar("EntryManifest", bound=Frozen)

_CACHE_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# What the line that explains a failure usually contains; the last such line of a step's output is
# reported (a Python traceback ends with the exception's own line).
_ERROR_WORDS = re.compile(
    r"error|exception|fail|fatal|abort|assert|traceback|killed|denied|not found|no such|invalid"
    r"|out of memory",
    re.IGNORECASE,
)
_OUTPUT_TAIL = 50
# Secret even where no step declares them (a `docker run -e HF_TOKEN` by hand).
_TOKEN_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
_REDACTED = "***"


class BuildError(Exception):
    """The build cannot finish; `reason` is the one line reported to the operator and the log."""

    def __init__(self, reason: str, *, step: str | None = None, exit_code: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.step = step
        self.exit_code = exit_code


@dataclass(frozen=True)
class CacheLayout:
    """Where the entry of one cacheKey and its build's private files live."""

    cache_dir: Path
    cache_key: str

    @property
    def entry(self) -> Path:
        """The finished entry."""
        return self.cache_dir / self.cache_key

    @property
    def work(self) -> Path:
        """The build in progress."""
        return self.cache_dir / f".work-{self.cache_key}"

    @property
    def lock(self) -> Path:
        """The file whose lock makes one process the builder of this key."""
        return self.cache_dir / f".lock-{self.cache_key}"

    def trash(self) -> Path:
        """A fresh name to move an incomplete entry to before deleting it."""
        return self.cache_dir / f".trash-{self.cache_key}.{os.getpid()}-{time.monotonic_ns()}"

    def leftovers(self) -> list[Path]:
        """What builders of this key that did not finish left behind."""
        found = sorted(self.cache_dir.glob(f".trash-{self.cache_key}.*"))
        return [self.work, *found] if self.work.exists() else found


def duration(seconds: float) -> str:
    """`4.2s`, `12m03s` or `1h05m`."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def size(count: int) -> str:
    """Bytes in the largest binary unit that keeps the number at least 1."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.1f} {unit}" if unit != "B" else f"{count} B"
        value /= 1024
    return f"{value:.1f} TiB"


def secret_names(plan: BuildPlan) -> set[str]:
    """The environment variables steps take from the Job, and the Hugging Face token's names anyway."""
    return {name for step in plan.steps for name in step.env_from_job} | set(_TOKEN_NAMES)


def secret_values(plan: BuildPlan) -> list[str]:
    """Their values: never printed, never stored."""
    return [os.environ[name] for name in sorted(secret_names(plan)) if os.environ.get(name)]


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret value replaced."""
    for secret in secrets:
        text = text.replace(secret, _REDACTED)
    return text


def last_error_line(lines: Sequence[str]) -> str:
    """The output line that most likely explains a failure."""
    meaningful = [line.strip() for line in lines if line.strip()]
    for line in reversed(meaningful):
        if _ERROR_WORDS.search(line):
            return line
    return meaningful[-1] if meaningful else "(the step printed nothing)"


def resolve_argv(argv: Sequence[str], work: Path, examples_dir: str | None = None) -> list[str]:
    """`argv` with `{work}` replaced, and TensorRT-LLM's examples moved to `examples_dir` if given."""
    resolved = []
    for arg in argv:
        arg = arg.replace(WORK_DIR, str(work))
        examples = pinned.TRTLLM_EXAMPLES_DIR
        if examples_dir is not None and (arg == examples or arg.startswith(examples + "/")):
            arg = examples_dir + arg[len(examples) :]
        resolved.append(arg)
    return resolved


def refusals(plan: BuildPlan, found: Versions) -> list[str]:
    """Why this builder must not run `plan` here, before it touches anything."""
    problems = []
    if plan.format_version != PLAN_FORMAT_VERSION:
        problems.append(
            f"the plan has format {plan.format_version}; this builder reads {PLAN_FORMAT_VERSION}"
        )
    if not _CACHE_KEY.fullmatch(plan.cache_key):
        problems.append(f"cacheKey {plan.cache_key!r} is not a plain directory name")
    if found.tensorrt_llm == UNKNOWN:
        problems.append(
            f"tensorrt_llm is not installed here; run the plan in {plan.builder_image} "
            f"(or set {ASSUME_TRTLLM_VERSION_ENV} to test the builder without it)"
        )
    elif found.tensorrt_llm != plan.trtllm_version:
        problems.append(
            f"the plan was made for TensorRT-LLM {plan.trtllm_version} but this image has "
            f"{found.tensorrt_llm}; run it in {plan.builder_image}"
        )
    for step in plan.steps:
        for name in step.env_from_job:
            if not os.environ.get(name):
                problems.append(f"step {step.name} needs {name} from the Job's environment, which is not set")
    return problems


def read_manifest(entry: Path, model: type[EntryManifest]) -> tuple[EntryManifest | None, list[str]]:
    """The `manifest.json` of a cache entry (a build's or a snapshot's), or why it cannot be read."""
    try:
        return model.model_validate_json((entry / MANIFEST_NAME).read_bytes()), []
    except FileNotFoundError:
        return None, [f"{entry} has no {MANIFEST_NAME}"]
    except (OSError, ValidationError) as error:
        return None, [f"{entry / MANIFEST_NAME} is unreadable: {str(error).splitlines()[0]}"]


def file_problems(directory: Path, files: Mapping[str, FileRecord], *, hashes: bool = False) -> list[str]:
    """Where the files under `directory` differ from a manifest's records (sizes; contents with `hashes`)."""
    problems = []
    for relative, record in files.items():
        path = directory / relative
        try:
            actual = path.stat().st_size
        except FileNotFoundError:
            problems.append(f"{relative} is missing")
            continue
        if actual != record.size:
            problems.append(f"{relative} has {actual} bytes, the manifest {record.size}")
        elif hashes and sha256_of(path) != record.sha256:
            problems.append(f"{relative} does not match its sha256")
    return problems


def record_files(root: Path) -> dict[str, FileRecord]:
    """Every file under `root` by its `/`-separated relative path, its bytes on disk when this returns."""
    return {
        path.relative_to(root).as_posix(): FileRecord(
            size=path.stat().st_size, sha256=sha256_of(path, sync=True)
        )
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def write_manifest(work: Path, manifest: Frozen) -> None:
    """Write `manifest` last into the entry being made in `work`, durably."""
    with (work / MANIFEST_NAME).open("w") as handle:
        handle.write(manifest.model_dump_json(indent=2) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    fsync_dir(work)


def inspect_entry(entry: Path, cache_key: str, *, hashes: bool = False) -> tuple[Manifest | None, list[str]]:
    """The manifest of a cache entry and what is wrong with the entry (nothing when it is complete).

    Sizes are always compared; contents only with `hashes` (reading every engine takes a while).
    """
    manifest, problems = read_manifest(entry, Manifest)
    if manifest is None:
        return None, problems
    if manifest.cache_key != cache_key:
        problems.append(f"{entry / MANIFEST_NAME} is for cacheKey {manifest.cache_key}")
    return manifest, problems + file_problems(entry, manifest.files, hashes=hashes)


def check_engines(work: Path, plan: BuildPlan) -> list[str]:
    """Where the built engines' own `config.json` disagree with the plan's expectations."""
    problems = []
    for expectation in plan.expectations:
        where = expectation.config_path
        try:
            config = json.loads((work / where).read_text())
        except (OSError, ValueError) as error:
            problems.append(f"{where} is unreadable: {error}")
            continue
        for key, expected in expectation.values.items():
            actual = _lookup(config, key)
            if actual is _MISSING:
                problems.append(f"{where}: {key} is missing, the plan asks for {expected!r}")
            elif type(actual) is not type(expected) or actual != expected:
                problems.append(f"{where}: {key} is {actual!r}, the plan asks for {expected!r}")
        world_size = _lookup(config, "pretrained_config.mapping.world_size")
        if isinstance(world_size, int):
            directory = (work / where).parent
            missing = [
                f"rank{r}.engine" for r in range(world_size) if not (directory / f"rank{r}.engine").is_file()
            ]
            if missing:
                problems.append(f"{directory.name}/ lacks {', '.join(missing)} of world size {world_size}")
    return problems


_MISSING = object()


def _lookup(document: object, dotted: str) -> object:
    for part in dotted.split("."):
        if not isinstance(document, dict) or part not in document:
            return _MISSING
        document = document[part]
    return document


def sha256_of(path: Path, *, sync: bool = False) -> str:
    """The file's sha256; with `sync`, its bytes are on disk when this returns."""
    with path.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
        if sync:
            # Before the rename publishes the entry, its bytes must be on disk, not only in the page cache.
            os.fsync(handle.fileno())
    return digest


def fsync_dir(path: Path) -> None:
    """Make the directory's entries (a rename into it) durable."""
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@contextmanager
def locked(path: Path, log: Log) -> Iterator[None]:
    """Hold the exclusive lock of `path` (waiting for another holder); the kernel drops it at any death."""
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another builder of this cacheKey holds {path}; waiting for it to finish")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _step_environment(step: BuildStep, secret_names: set[str]) -> dict[str, str]:
    # A step sees only the Job secrets it declares.
    environment = {k: v for k, v in os.environ.items() if k not in secret_names - set(step.env_from_job)}
    environment["PYTHONUNBUFFERED"] = "1"
    return environment


def _run_step(
    step: BuildStep, argv: list[str], label: str, plan: BuildPlan, log: Log, moved: Callable[[], None]
) -> None:
    secrets = secret_values(plan)
    try:
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=_step_environment(step, secret_names(plan)),
            text=True,
            errors="replace",
        )
    except OSError as error:
        raise BuildError(f"{label} could not start {argv[0]}: {error.strerror}", step=step.name) from None
    tail: deque[str] = deque(maxlen=_OUTPUT_TAIL)
    assert process.stdout is not None
    with process.stdout:
        try:
            for line in process.stdout:
                moved()
                line = redact(line.rstrip(), secrets)
                tail.append(line)
                log(f"  {line}")
            code = process.wait()
        except BaseException:
            # Interrupted (SIGTERM): the tool must not go on writing into a directory about to be removed.
            process.kill()
            process.wait()
            raise
    if code < 0:
        what = f"was killed by {signal.Signals(-code).name}"
        if -code == signal.SIGKILL:
            what += " (the kernel's OOM killer does this when the pod runs out of memory)"
    elif code > 0:
        what = f"exited with code {code}"
    else:
        return
    raise BuildError(f"{label} {what}: {last_error_line(tail)}", step=step.name, exit_code=code)


def dry_run(plan: BuildPlan, cache_dir: Path, found: Versions, *, examples_dir: str | None, log: Log) -> None:
    """Print what `build` would do: the entry's state, each step's argv, what is kept and checked."""
    layout = CacheLayout(cache_dir, plan.cache_key)
    manifest, problems = inspect_entry(layout.entry, plan.cache_key)
    if manifest is not None and not problems:
        state = "complete: a build exits at once"
    else:
        state = f"incomplete ({problems[0]}): a build replaces it" if layout.entry.exists() else "absent"
    steps = len(plan.steps)
    log(f"plan {plan.cache_key} for {plan.model_type}: {steps} steps, TensorRT-LLM {plan.trtllm_version}")
    log(f"cache entry {layout.entry}: {state}")
    log(f"work directory {layout.work}")
    for problem in refusals(plan, found):
        log(f"a build here would refuse: {problem}")
    for index, step in enumerate(plan.steps, 1):
        log(f"[{index}/{len(plan.steps)}] {step.name}: {step.description}")
        log(f"  $ {shlex.join(resolve_argv(step.argv, layout.work, examples_dir))}")
        if step.env_from_job:
            log(f"  environment from the Job: {', '.join(step.env_from_job)}")
    log(f"keeps {', '.join(plan.keep)}; removes every other part of the work directory")
    for expectation in plan.expectations:
        values = ", ".join(f"{key}={value}" for key, value in expectation.values.items())
        log(f"checks {expectation.config_path}: {values}")


def build(
    plan: BuildPlan,
    cache_dir: Path,
    found: Versions,
    gpu: Gpu,
    *,
    examples_dir: str | None = None,
    log: Log = print,
) -> BuildSucceeded:
    """Make `<cache_dir>/<cacheKey>` complete, building it unless it already is.

    Raises:
        BuildError: the plan is refused here, a step fails, or the engines disagree with the plan.
    """
    started = time.monotonic()
    problems = refusals(plan, found)
    if problems:
        raise BuildError("refused: " + "; ".join(problems), step=None)
    layout = CacheLayout(cache_dir, plan.cache_key)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with locked(layout.lock, log):
        manifest, problems = inspect_entry(layout.entry, plan.cache_key)
        if manifest is not None and not problems:
            log(f"cache entry {layout.entry} is complete: nothing to build")
            return BuildSucceeded.from_manifest(manifest, cache_hit=True, seconds=time.monotonic() - started)
        if layout.entry.exists():
            log(f"cache entry {layout.entry} is incomplete ({problems[0]}); building it again")
            layout.entry.rename(layout.trash())
        for leftover in layout.leftovers():
            log(f"removing {leftover.name}, left by a build of this cacheKey that did not finish")
            shutil.rmtree(leftover)
        layout.work.mkdir()
        try:
            manifest = _build_in(layout, plan, found, gpu, examples_dir, log, started)
        except BaseException:
            shutil.rmtree(layout.work, ignore_errors=True)
            raise
        layout.work.rename(layout.entry)
        fsync_dir(cache_dir)
    seconds = time.monotonic() - started
    log(f"cache entry {layout.entry} is ready after {duration(seconds)}")
    return BuildSucceeded.from_manifest(manifest, cache_hit=False, seconds=seconds)


def _build_in(
    layout: CacheLayout,
    plan: BuildPlan,
    found: Versions,
    gpu: Gpu,
    examples_dir: str | None,
    log: Log,
    started: float,
) -> Manifest:
    work, total = layout.work, len(plan.steps)
    log(
        f"building {plan.cache_key} ({plan.model_type}) in {work}: {total} steps, TensorRT-LLM "
        f"{found.tensorrt_llm}, GPU {gpu.name} (compute capability {gpu.compute_capability})"
    )
    records = []
    meter = BuildMeter(total)
    meter.begin(1, plan.steps[0].name)
    with beating(meter.sample, log) as say:
        for index, step in enumerate(plan.steps, 1):
            label = f"step {step.name} ({index}/{total})"
            argv = resolve_argv(step.argv, work, examples_dir)
            if index > 1:
                meter.begin(index, step.name)
                say()
            log(f"[{index}/{total}] {step.name}: {step.description}")
            log(f"  $ {shlex.join(argv)}")
            begun = time.monotonic()
            try:
                _run_step(step, argv, label, plan, log, meter.moved)
            except BuildError as error:
                if error.step is None:
                    raise BuildError(f"{label}: {error.reason}", step=step.name) from None
                raise
            missing = [path for path in step.produces if not (work / path).exists()]
            if missing:
                produced = ", ".join(missing)
                raise BuildError(
                    f"{label} exited 0 but did not produce {produced}", step=step.name, exit_code=0
                )
            seconds = time.monotonic() - begun
            records.append(StepRecord(name=step.name, seconds=round(seconds, 3)))
            elapsed = duration(time.monotonic() - started)
            log(f"[{index}/{total}] {step.name}: done in {duration(seconds)} (elapsed {elapsed})")

    absent = [name for name in plan.keep if not (work / name).is_dir()]
    if absent:
        raise BuildError(f"the steps left no {', '.join(absent)} to keep", step="finish")
    intermediates = sorted(path for path in work.iterdir() if path.name not in plan.keep)
    if intermediates:
        log(f"removing intermediates: {', '.join(path.name for path in intermediates)}")
    for path in intermediates:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()

    problems = check_engines(work, plan)
    if problems:
        raise BuildError("the engines disagree with the plan: " + "; ".join(problems), step="verify")
    log(f"checked {', '.join(e.config_path for e in plan.expectations)} against the plan")

    files = record_files(work)
    manifest = Manifest(
        cache_key=plan.cache_key,
        plan=plan,
        versions=found,
        gpu=gpu,
        files=files,
        steps=tuple(records),
        created=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    log(f"hashed {len(files)} files, {size(sum(f.size for f in files.values()))}; writing {MANIFEST_NAME}")
    write_manifest(work, manifest)
    return manifest
