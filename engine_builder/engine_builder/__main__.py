"""`python -m engine_builder`: the build Job's command line.

    python -m engine_builder build --plan plan.json --cache-dir DIR [--dry-run]
    python -m engine_builder build --plan-json '{"cache_key": ...}' --cache-dir DIR
    python -m engine_builder verify --cache-dir DIR --cache-key KEY
    python -m engine_builder download --plan-json '{"key": ...}' --cache-dir DIR [--token-file FILE]

`build` exits 0 when `DIR/<cacheKey>` is complete (built now or found) and 1 when the build is refused or
fails. Either way it leaves one JSON line (see `result_format`) in the termination log, which Kubernetes
copies into the pod status for the operator. `verify` re-reads every file of an entry against its
manifest. `download` puts a Hugging Face snapshot into the cache for the trtllm-serve runtime (see
`weights`) and reports like `build` (see `weights_format`). Imports nothing from the operator, kopf or
kubernetes.
"""

from __future__ import annotations

import argparse
import signal
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from pydantic import ValidationError

from engine_builder import probe
from engine_builder.plan_format import BuildPlan
from engine_builder.plan_runner import BuildError, build, dry_run, inspect_entry, redact, secret_values, size
from engine_builder.result_format import BuildFailed, BuildSucceeded, termination_message
from engine_builder.weights import WeightsError, download
from engine_builder.weights_format import DownloadFailed, DownloadPlan, DownloadSucceeded
from engine_builder.weights_format import termination_message as download_message

# Kubernetes mounts this file into every container; its content becomes the termination message.
DEFAULT_TERMINATION_LOG = Path("/dev/termination-log")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine_builder", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("build", help="run a build plan into the engine cache")
    plan = run.add_mutually_exclusive_group(required=True)
    plan.add_argument("--plan", type=Path, help="the build_plan.json the operator wrote")
    plan.add_argument("--plan-json", help="the plan itself (the operator's build Jobs pass it so)")
    run.add_argument("--cache-dir", type=Path, required=True, help="the engine cache volume")
    run.add_argument("--dry-run", action="store_true", help="print the steps and their argv; run nothing")
    run.add_argument(
        "--examples-dir",
        help="where TensorRT-LLM's example scripts are, if not where the plan says (relocated images, tests)",
    )
    run.add_argument(
        "--termination-log",
        type=Path,
        help=f"where the result line goes (default: {DEFAULT_TERMINATION_LOG}, when it exists)",
    )
    verify = commands.add_parser("verify", help="check every file of a cache entry against its manifest")
    verify.add_argument("--cache-dir", type=Path, required=True)
    verify.add_argument("--cache-key", required=True)
    fetch = commands.add_parser("download", help="put a Hugging Face snapshot into the engine cache, once")
    fetch.add_argument("--plan-json", required=True, help="the download plan (the operator's Jobs pass it)")
    fetch.add_argument("--cache-dir", type=Path, required=True, help="the engine cache volume")
    fetch.add_argument("--token-file", type=Path, help="a file holding the Hub token (mounted from a Secret)")
    fetch.add_argument(
        "--termination-log", type=Path, help=f"where the result line goes ({DEFAULT_TERMINATION_LOG})"
    )
    return parser


def _say(line: str) -> None:
    print(line, flush=True)


def _stop(signum: int, _frame: FrameType | None) -> None:
    raise BuildError(f"stopped by {signal.Signals(signum).name} (the Job was deleted or its deadline passed)")


def _read_plan(path: Path | None, text: str | None) -> BuildPlan:
    source = str(path) if path is not None else "--plan-json"
    try:
        data = path.read_bytes() if path is not None else (text or "").encode()
        return BuildPlan.model_validate_json(data)
    except OSError as error:
        raise BuildError(f"cannot read the plan {path}: {error.strerror}") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise BuildError(
            f"{source} is not a build plan this builder reads: {where}: {first['msg']}"
        ) from None


def _run(args: argparse.Namespace) -> BuildSucceeded | BuildFailed | None:
    plan: BuildPlan | None = None
    secrets: list[str] = []
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        plan = _read_plan(args.plan, args.plan_json)
        secrets = secret_values(plan)
        if args.dry_run:
            dry_run(plan, args.cache_dir, probe.versions(), examples_dir=args.examples_dir, log=_say)
            return None
        return build(
            plan, args.cache_dir, probe.versions(), probe.gpu(), examples_dir=args.examples_dir, log=_say
        )
    except BuildError as error:
        reason, step, code = error.reason, error.step, error.exit_code
    except Exception as error:  # a bug or a full volume: still report it, in one line
        traceback.print_exc()
        reason, step, code = f"internal error: {type(error).__name__}: {error}", None, None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return BuildFailed(
        cache_key=plan.cache_key if plan is not None else None,
        step=step,
        exit_code=code,
        reason=redact(" ".join(reason.split()), secrets),
    )


def _build(args: argparse.Namespace) -> int:
    result = _run(args)
    if result is None:
        return 0
    if isinstance(result, BuildSucceeded):
        parts = ", ".join(f"{name} {size(count)}" for name, count in result.sizes.items())
        _say(f"engine_builder: {result.cache_key} is ready: {size(result.total_bytes)} ({parts})")
    else:
        print(f"engine_builder: build failed: {result.reason}", file=sys.stderr, flush=True)
    path = args.termination_log
    if path is None and DEFAULT_TERMINATION_LOG.exists():
        path = DEFAULT_TERMINATION_LOG
    if path is not None:
        try:
            path.write_text(termination_message(result) + "\n")
        except OSError as error:
            print(f"engine_builder: cannot write {path}: {error.strerror}", file=sys.stderr)
    return 0 if isinstance(result, BuildSucceeded) else 1


def _verify(args: argparse.Namespace) -> int:
    entry = args.cache_dir / args.cache_key
    manifest, problems = inspect_entry(entry, args.cache_key, hashes=True)
    for problem in problems:
        print(f"{entry}: {problem}", file=sys.stderr)
    if manifest is None or problems:
        return 1
    _say(f"{entry}: {len(manifest.files)} files match {entry.name}/manifest.json")
    return 0


def _fetch(args: argparse.Namespace) -> DownloadSucceeded | DownloadFailed:
    key: str | None = None
    token: str | None = None
    previous = {sig: signal.signal(sig, _stop_download) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        plan = DownloadPlan.model_validate_json(args.plan_json)
        key = plan.key
        if args.token_file is not None:
            try:
                token = args.token_file.read_text().strip() or None
            except OSError as error:
                raise WeightsError(
                    f"cannot read the token file {args.token_file}: {error.strerror}"
                ) from None
        return download(plan, args.cache_dir, token=token, log=_say)
    except ValidationError as error:
        first = error.errors()[0]
        reason = f"--plan-json is not a download plan: {'.'.join(map(str, first['loc']))}: {first['msg']}"
        step = None
    except WeightsError as error:
        reason, step = error.reason, error.step
    except Exception as error:
        traceback.print_exc()
        reason, step = f"internal error: {type(error).__name__}: {error}", None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    secrets = [token] if token else []
    return DownloadFailed(key=key, step=step, reason=redact(" ".join(reason.split()), secrets))


def _stop_download(signum: int, _frame: FrameType | None) -> None:
    raise WeightsError(
        f"stopped by {signal.Signals(signum).name} (the Job was deleted or its deadline passed)"
    )


def _download(args: argparse.Namespace) -> int:
    result = _fetch(args)
    if isinstance(result, DownloadFailed):
        print(f"engine_builder: download failed: {result.reason}", file=sys.stderr, flush=True)
    path = args.termination_log
    if path is None and DEFAULT_TERMINATION_LOG.exists():
        path = DEFAULT_TERMINATION_LOG
    if path is not None:
        try:
            path.write_text(download_message(result) + "\n")
        except OSError as error:
            print(f"engine_builder: cannot write {path}: {error.strerror}", file=sys.stderr)
    return 0 if isinstance(result, DownloadSucceeded) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return the exit code."""
    args = _parser().parse_args(argv)
    if args.command == "download":
        return _download(args)
    return _build(args) if args.command == "build" else _verify(args)


if __name__ == "__main__":
    sys.exit(main())
