"""`make bench` cannot rot: its short mode (N = 100) runs to the end on a control plane of its own.

The timing targets are the full benchmark's business (they are reported here, not enforced); what this
checks is that every phase ran and produced its figures, that the report and the plot were written,
and that the operator wrote nothing in the steady state, which holds at any N. It runs two pairs of floor
and operator runs, as the full benchmark runs three at its largest N, and checks how they are summed up.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
def test_the_short_benchmark_runs_every_phase_and_writes_its_report(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "benchmarks.operator_scale", "--short", "--pairs", "2"]
    run = subprocess.run(
        [*command, "--results", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    report = json.loads((tmp_path / "operator-scale.json").read_text())

    (size,) = report["sizes"]
    assert size["n"] == 100
    assert len(size["floor_ready"]) == len(size["op_ready"]) == 100
    assert size["t_floor"] > 0 and size["t_op"] > 0 and size["ratio"] == size["t_op"] / size["t_floor"]
    assert size["reconciles"] >= 100 and size["api_requests"] > 0
    assert size["peak_rss_mib"] > 0 and size["cpu_seconds"] > size["cpu_seconds_run"] > 0
    (shown,) = [pair for pair in size["pairs"] if pair["ratio"] == size["ratio"]]
    assert shown["cpu_ms_per_resource"] == pytest.approx(1000 * size["cpu_seconds_run"] / 100)
    assert size["floor_client_cpu_ms_per_resource"] > 0
    assert size["cpu_by_process"]["operator"]["operator"] > 0
    assert size["cpu_by_process"]["floor"]["kube-apiserver"] > 0
    first, second = size["pairs"]
    assert size["ratio"] in (first["ratio"], second["ratio"])  # the pair with the median ratio
    assert size["cpu_ms_per_resource"] == pytest.approx(
        (first["cpu_ms_per_resource"] + second["cpu_ms_per_resource"]) / 2
    )
    assert [pair["operator_first"] for pair in size["pairs"]] == [True, False]  # the last: floor first
    assert "2 pairs of floor and operator runs in turn" in run.stdout

    steady = report["steady_state"]
    assert steady["window_seconds"] >= 19
    assert steady["writes_per_minute"] == 0
    for figures in report["latency"].values():
        assert figures["samples"] == 10
        assert 0 < figures["p50_ms"] <= figures["p95_ms"] <= figures["max_ms"]

    targets = {target["name"]: target for target in report["targets"]}
    assert len(targets) == 8
    assert targets["steady-state writes per minute"]["enforced"] is True
    assert targets["steady-state writes per minute"]["met"] is True
    assert (tmp_path / "operator-scale.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert "| target | value | limit | met |" in run.stdout
