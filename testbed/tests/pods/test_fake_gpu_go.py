"""The fake GPU plugin's own Go tests (testbed/go/nodes/fake-gpu/main_test.go): the environment a
container is given and the device IDs. Their binary is compiled with the plugin (`fakegpu.test_binary`), so
running them needs no Go caches. Beside the real-node tier, which builds the plugin anyway; on real nodes:
tests/pods/test_fake_gpus.py."""

from __future__ import annotations

import subprocess

import pytest

from mmd_testbed.localcluster import fakegpu
from mmd_testbed.localcluster.layout import Layout

pytestmark = pytest.mark.pods


def test_the_plugins_go_tests_pass() -> None:
    layout = Layout.discover()
    result = subprocess.run(
        [str(fakegpu.test_binary(fakegpu.ensure_fake_gpu(layout))), "-test.count=1", "-test.v"],
        cwd=fakegpu.source_dir(layout),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--- PASS" in result.stdout and "--- FAIL" not in result.stdout, result.stdout
