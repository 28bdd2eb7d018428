"""`python -m mmd_testbed` runs from any directory, not only from the checkout's root: the test bed imports
nothing of the checkout's `tools` or `benchmarks` (an import-linter contract says so too), and finds the
checkout from its own files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _run_elsewhere(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # Nothing that would put the checkout's root on the path: not the environment, not the directory.
    environ = {
        key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "MMD_CLUSTER_DIR")
    }
    return subprocess.run(
        [sys.executable, "-m", "mmd_testbed", *args],
        cwd=where,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_help_and_the_cluster_status_run_outside_the_checkout(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    helped = _run_elsewhere(elsewhere, "--help")
    assert helped.returncode == 0, helped.stderr
    assert "cluster" in helped.stdout and "images" in helped.stdout

    state_dir = tmp_path / "cluster"
    status = _run_elsewhere(elsewhere, "cluster", "--dir", str(state_dir), "status")
    # 3: no cluster was ever started there; the command got as far as reading the state directory.
    assert status.returncode == 3, status.stderr
    assert status.stdout.strip() == (
        f"no cluster recorded in {state_dir} (run `python -m mmd_testbed cluster up`)"
    )
    assert "Traceback" not in status.stderr
