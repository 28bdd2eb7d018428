"""The fake GPU plugin's own Go tests (testbed/go/nodes/fake-gpu/main_test.go): the environment a
container is given and the device IDs, run with `go test` in the same `go` environment as its build.
Beside the real-node tier, which builds the plugin anyway; on real nodes: tests/pods/test_fake_gpus.py."""

from __future__ import annotations

import subprocess

import pytest

from mmd_testbed.localcluster import fakegpu
from mmd_testbed.localcluster.binaries import go_environment
from mmd_testbed.localcluster.layout import Layout, Toolchain

pytestmark = pytest.mark.pods


def test_the_plugins_go_tests_pass() -> None:
    result = subprocess.run(
        [str(Toolchain.discover().go), "test", "-count=1", "."],
        cwd=fakegpu.source_dir(Layout.discover()),
        env=go_environment(),
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
