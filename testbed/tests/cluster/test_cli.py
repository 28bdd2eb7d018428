"""The local cluster's command line as a person runs it: up (twice), status, a dead component, kubeconfig,
down.

This starts a second, one-node cluster of its own in a temporary directory, through the real
command line, so that killing one of its components cannot disturb the session cluster.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmd_testbed.localcluster import processes
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.components import COMPONENTS

pytestmark = pytest.mark.cluster


def _mmctl(state_dir: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mmd_testbed", "cluster", "--dir", str(state_dir), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def cli_cluster_dir(tmp_path: Path) -> Iterator[Path]:
    state_dir = tmp_path / "cli-cluster"
    try:
        yield state_dir
    finally:
        LocalCluster(state_dir, say=lambda _line: None).down()


def test_up_status_dead_component_and_down(cli_cluster_dir: Path) -> None:
    not_up = _mmctl(cli_cluster_dir, "status")
    assert not_up.returncode == 3, not_up.stdout + not_up.stderr

    started = time.monotonic()
    first = _mmctl(cli_cluster_dir, "up", "--nodes", "1", "--gpus-per-node", "4")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "cluster ready" in first.stdout
    # A sanity bound for a warm cache (a few seconds when the machine is idle; `make test` runs three
    # workers on two cores, and a minute was seen under that load).
    assert time.monotonic() - started < 180

    cluster = LocalCluster(cli_cluster_dir)
    state = cluster.load_state()
    assert state is not None
    pids = {name: record.pid for name, record in state.processes.items()}
    assert sorted(pids) == sorted(COMPONENTS)

    second = _mmctl(cli_cluster_dir, "up", "--nodes", "1", "--gpus-per-node", "4")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "already running" in second.stdout
    again = cluster.load_state()
    assert again is not None
    assert {name: record.pid for name, record in again.processes.items()} == pids

    healthy = _mmctl(cli_cluster_dir, "status")
    assert healthy.returncode == 0, healthy.stdout
    assert healthy.stdout.count("healthy") == len(COMPONENTS)
    assert "nodes: 1/1 Ready" in healthy.stdout

    kubeconfig = _mmctl(cli_cluster_dir, "kubeconfig")
    assert Path(kubeconfig.stdout.strip()) == cli_cluster_dir.resolve() / "kubeconfig"

    os.kill(pids["kube-scheduler"], signal.SIGKILL)
    scheduler_record = state.processes["kube-scheduler"]
    deadline = time.monotonic() + 10
    while processes.is_alive(scheduler_record) and time.monotonic() < deadline:
        time.sleep(0.1)
    degraded = _mmctl(cli_cluster_dir, "status")
    assert degraded.returncode == 1
    scheduler_line = next(line for line in degraded.stdout.splitlines() if line.startswith("kube-scheduler"))
    assert "dead" in scheduler_line

    down = _mmctl(cli_cluster_dir, "down")
    assert down.returncode == 0, down.stdout + down.stderr
    for name, record in state.processes.items():
        assert not processes.is_alive(record), f"{name} (pid {record.pid}) outlived `down`"
    assert _mmctl(cli_cluster_dir, "status").returncode == 3
    assert (cli_cluster_dir / "logs" / "kube-apiserver.log").stat().st_size > 0
