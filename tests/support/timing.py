"""A pytest plugin that records how long each tier and the longest tests took (`--record-times PATH`).

`make test` asks for it; `tools.times render` turns the file into docs/development/times.md. Under
pytest-xdist the reports of every worker reach the controller, which alone writes the file: per tier the
tests, the seconds spent in them (setup, call and teardown, summed over workers) and the span from the
tier's first test starting to its last one ending; per worker, the modules it ran (their seconds and
span); the longest tests; the session's wall time.
Imports pytest and the standard library.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

# How many of the longest tests the file keeps.
LONGEST = 15


def tier_of(nodeid: str) -> str:
    """The tier a test belongs to: the folder under `tests/` or `testbed/tests/` (`testbed` for the rest)."""
    module = nodeid.split("::", 1)[0]
    parts = module.split("/")
    if parts[0] == "testbed":
        inner = parts[2:]
        return inner[0] if len(inner) > 1 else "testbed"
    return parts[1] if len(parts) > 2 else "tests"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-times",
        metavar="PATH",
        default=None,
        help="write per-tier and per-test times to PATH as JSON (tools.times render reads it)",
    )


class _Recorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.started = time.time()
        self.seconds: dict[str, float] = defaultdict(float)
        self.spans: dict[str, tuple[float, float]] = {}
        self.outcomes: dict[str, str] = {}
        self.workers: dict[str, str] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        first, last = self.spans.get(report.nodeid, (report.start, report.stop))
        self.spans[report.nodeid] = (min(first, report.start), max(last, report.stop))
        # Under xdist the controller's report carries the worker it came from.
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        self.workers[report.nodeid] = str(getattr(gateway, "id", "main"))
        if report.when == "call" or report.outcome != "passed":
            self.outcomes.setdefault(report.nodeid, report.outcome)
            if report.outcome != "passed":
                self.outcomes[report.nodeid] = report.outcome

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, exitstatus: int) -> None:
        tiers: dict[str, dict[str, float]] = {}
        for nodeid, seconds in self.seconds.items():
            tier = tiers.setdefault(
                tier_of(nodeid), {"tests": 0, "seconds": 0.0, "start": float("inf"), "stop": 0.0}
            )
            start, stop = self.spans[nodeid]
            tier["tests"] += 1
            tier["seconds"] += seconds
            tier["start"] = min(tier["start"], start)
            tier["stop"] = max(tier["stop"], stop)
        modules: dict[str, dict[str, Any]] = {}
        for nodeid, seconds in self.seconds.items():
            start, stop = self.spans[nodeid]
            module = modules.setdefault(
                nodeid.split("::", 1)[0],
                {"worker": self.workers[nodeid], "seconds": 0.0, "start": start, "stop": stop},
            )
            module["seconds"] += seconds
            module["start"], module["stop"] = min(module["start"], start), max(module["stop"], stop)
        longest = sorted(self.seconds.items(), key=lambda item: item[1], reverse=True)[:LONGEST]
        record = {
            "wall": time.time() - self.started,
            "exit": int(exitstatus),
            "outcomes": _count(self.outcomes.values()),
            "tiers": {
                name: {
                    "tests": int(tier["tests"]),
                    "seconds": round(tier["seconds"], 1),
                    "span": round(tier["stop"] - tier["start"], 1),
                    "from": round(tier["start"] - self.started, 1),
                }
                for name, tier in sorted(tiers.items())
            },
            "modules": {
                name: {
                    "worker": module["worker"],
                    "seconds": round(module["seconds"], 1),
                    "from": round(module["start"] - self.started, 1),
                    "to": round(module["stop"] - self.started, 1),
                }
                for name, module in sorted(modules.items(), key=lambda item: item[1]["start"])
            },
            "longest": [{"test": nodeid, "seconds": round(seconds, 1)} for nodeid, seconds in longest],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(record, indent=2) + "\n")


def _count(outcomes: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for outcome in outcomes:
        counts[outcome] += 1
    return dict(counts)


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--record-times")
    # Only the controller writes: an xdist worker has `workerinput`.
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Recorder(Path(path)), "mmd-record-times")
