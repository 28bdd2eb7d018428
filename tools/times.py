"""How long `make test` and `make demo` take, phase by phase, written by the runs themselves.

    python -m tools.times start test|demo              forget the last run's phases of that command
    python -m tools.times run test|demo PHASE -- CMD   run CMD and record its seconds as PHASE
    python -m tools.times render test|demo             write that command's section of TIMES_PAGE

Each command's phases go to `out/times/<command>/phases.jsonl`; `make test` adds pytest's own record
(`tests/support/timing.py`: per tier and the longest tests). `render` adds what the run built into the
caches (the control plane, the nodes, the metrics path, LeaderWorkerSet, the images: each cache's
manifest records the seconds of each binary) and the machine, and rewrites its command's section of
docs/development/times.md, keeping the other's. The README and CONTRIBUTING quote that page, so no time
in the docs is typed by hand. Maintainer tooling; the standard library only, since `run` times the
virtualenv's creation too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
OUT = REPO_ROOT / "out" / "times"
TIMES_PAGE = REPO_ROOT / "docs" / "development" / "times.md"
COMMANDS = ("test", "demo")
_HEADER = """# How long the two commands take

Written by `make test` and `make demo` themselves (`tools/times.py`), each rewriting its own section at
the end of a successful run; nothing here is typed by hand. A section says which commit ran, on what
machine, and what was cold: a cache built during the run (the Go builds, the images) counts in its
phase. To record a fresh machine's figures, run the command on one, or with empty caches
(`XDG_CACHE_HOME` and `PIP_CACHE_DIR` pointing at empty directories: the test bed's Go caches are under
the first), in a fresh clone.
"""
_BEGIN, _END = "<!-- times:{} begin -->", "<!-- times:{} end -->"


def _cache_root() -> Path:
    # As mmd_testbed.localcluster.layout.default_cache_root, which this module cannot import (see above).
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mmd-operator"


def start(command: str, out: Path = OUT) -> None:
    """Forget the previous run of `command` and note when this one began."""
    folder = out / command
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.iterdir():
        stale.unlink()
    (folder / "started").write_text(f"{time.time()}\n")


def run(command: str, phase: str, argv: Sequence[str], out: Path = OUT) -> int:
    """Run `argv`, append its phase's seconds and exit code, and return the code."""
    began = time.time()
    code = subprocess.call(list(argv))
    record = {"phase": phase, "seconds": round(time.time() - began, 1), "exit": code, "began": began}
    path = out / command / "phases.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as phases:
        phases.write(json.dumps(record) + "\n")
    return code


def _read_phases(folder: Path) -> list[dict[str, object]]:
    path = folder / "phases.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _built_since(since: float) -> list[tuple[str, dict[str, float]]]:
    """The caches built at or after `since`: (cache, seconds per step) from each manifest."""
    built = []
    for manifest in sorted(_cache_root().glob("*/*/manifest.json")):
        record = json.loads(manifest.read_text())
        stamp = record.get("built_at")
        if not stamp:
            continue
        at = datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
        if at >= since - 1:
            name = f"{manifest.parent.parent.name}/{manifest.parent.name.split('_')[0]}"
            built.append((name, {k: float(v) for k, v in dict(record.get("seconds") or {}).items()}))
    images = REPO_ROOT / ".local" / "images" / "images.json"
    if images.is_file() and images.stat().st_mtime >= since:
        seconds = {step: float(value) for step, value in json.loads(images.read_text())["seconds"].items()}
        if any(value >= 1 for step, value in seconds.items() if step not in ("total", "bases and wheels")):
            built.append(("images", seconds))
    return built


def _machine() -> str:
    memory = ""
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        kib = int(meminfo.read_text().split("MemTotal:")[1].split()[0])
        memory = f", {kib / 2**20:.0f} GiB"
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores{memory}"


def _commit() -> str:
    """The commit that ran, with `-dirty` when a tracked file other than this page differs.

    The page aside: each command's run rewrites it, so `make demo` after `make test` would never be clean.
    """

    def git(*argv: str) -> str:
        result = subprocess.run(
            ["git", "-C", str(REPO_ROOT), *argv], capture_output=True, text=True, check=False
        )
        return result.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    page = TIMES_PAGE.relative_to(REPO_ROOT).as_posix()
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", f":(exclude){page}")
    return f"{commit}-dirty" if changed else commit


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s" if seconds >= 60 else f"{seconds:.0f} s"


def section(command: str, out: Path = OUT, now: float | None = None) -> str:
    """The Markdown section of `command`'s last run, from its records in `out`."""
    folder = out / command
    started_file = folder / "started"
    began = float(started_file.read_text()) if started_file.is_file() else time.time()
    ended = now if now is not None else time.time()
    phases = _read_phases(folder)
    built = _built_since(began)
    lines = [
        f"## make {command}",
        "",
        f"{_minutes(ended - began)} in all, at {_commit()} on "
        f"{datetime.fromtimestamp(began, UTC):%Y-%m-%d %H:%M} UTC; {_machine()}; "
        + (f"cold: built {', '.join(name for name, _ in built)}." if built else "every cache warm."),
        "",
        "| phase | time | from |",
        "|---|---|---|",
    ]
    lines += [
        f"| {p['phase']} | {_minutes(float(str(p['seconds'])))} "
        f"| {_minutes(max(0.0, float(str(p['began'])) - began))} |"
        for p in phases
    ]
    if built:
        lines += [
            "",
            "Built during the run, each cache's own time and seconds per step (from its manifest); two Go "
            "caches build at once and the images beside them, so these overlap:",
            "",
        ]
        lines += ["| cache | steps |", "|---|---|"]
        for name, seconds in built:
            steps = ", ".join(f"{step} {value:.0f}" for step, value in seconds.items() if step != "total")
            total = seconds.get("total", sum(seconds.values()))
            lines.append(f"| {name} | {_minutes(total)}: {steps} |")
    lines += _pytest_lines(folder / "pytest.json")
    return "\n".join(lines) + "\n"


def _pytest_lines(path: Path) -> list[str]:
    if not path.is_file():
        return []
    record = json.loads(path.read_text())
    outcomes = ", ".join(f"{n} {what}" for what, n in sorted(record["outcomes"].items()))
    lines = [
        "",
        f"pytest: {_minutes(record['wall'])} wall, {outcomes}. Per tier: the tests' own seconds summed over "
        "the workers, and the span from the tier's first test starting to its last one ending:",
        "",
        "| tier | tests | seconds in tests | span | starts at |",
        "|---|---|---|---|---|",
    ]
    for name, tier in record["tiers"].items():
        lines.append(
            f"| {name} | {tier['tests']} | {_minutes(tier['seconds'])} | {_minutes(tier['span'])} "
            f"| {_minutes(tier['from'])} |"
        )
    lines += _worker_lines(record.get("modules", {}))
    lines += ["", "The longest tests (setup, call and teardown):", "", "| test | time |", "|---|---|"]
    lines += [f"| `{t['test']}` | {_minutes(t['seconds'])} |" for t in record["longest"]]
    return lines


def _worker_lines(modules: dict[str, dict[str, Any]]) -> list[str]:
    """Per xdist worker: how long it was busy, when it ended, and its modules of a minute or more."""
    if not modules:
        return []
    lines = [
        "",
        "Per worker (each runs whole work groups, longest first; the run ends with the last worker), "
        "with the modules that took a minute or more:",
        "",
        "| worker | seconds in tests | ends at | modules (seconds) |",
        "|---|---|---|---|",
    ]
    for worker in sorted({module["worker"] for module in modules.values()}):
        own = {name: module for name, module in modules.items() if module["worker"] == worker}
        busy = sum(module["seconds"] for module in own.values())
        ends = max(module["to"] for module in own.values())
        long = ", ".join(
            f"`{name.removeprefix('tests/')}` {module['seconds']:.0f}"
            for name, module in own.items()
            if module["seconds"] >= 60
        )
        lines.append(f"| {worker} | {_minutes(busy)} | {_minutes(ends)} | {long or '-'} |")
    return lines


def render(command: str, page: Path = TIMES_PAGE, out: Path = OUT) -> None:
    """Rewrite `command`'s section of `page`, keeping the other commands' sections."""
    old = page.read_text() if page.is_file() else ""
    sections = {}
    for name in COMMANDS:
        begin, end = _BEGIN.format(name), _END.format(name)
        if begin in old and end in old:
            sections[name] = old.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"
    sections[command] = section(command, out)
    body = [_HEADER]
    for name in COMMANDS:
        text = sections.get(name, f"## make {name}\n\nNot recorded yet.\n")
        body.append(f"{_BEGIN.format(name)}\n{text}{_END.format(name)}\n")
    page.write_text("\n".join(body))


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m tools.times", description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("start").add_argument("command", choices=COMMANDS)
    timed = verbs.add_parser("run")
    timed.add_argument("command", choices=COMMANDS)
    timed.add_argument("phase")
    timed.add_argument("argv", nargs=argparse.REMAINDER)
    verbs.add_parser("render").add_argument("command", choices=COMMANDS)
    args = parser.parse_args(argv)
    if args.verb == "start":
        start(args.command)
        return 0
    if args.verb == "run":
        command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        return run(args.command, args.phase, command)
    render(args.command)
    print(f"==> times of make {args.command} written to {TIMES_PAGE.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
