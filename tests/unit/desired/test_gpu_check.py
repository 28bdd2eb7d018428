"""The serving pod's GPU check, run as the pod runs it: `python3 -c PROGRAM` beside an `nvidia-smi` double.

The double is a shell script that prints what the real `nvidia-smi --query-gpu=name,compute_cap
--format=csv,noheader` prints for the GPUs it is given, or fails as it does with no device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmd_operator.config import OperatorConfig
from mmd_operator.desired.decision import manifests
from mmd_operator.desired.gpu_check import GPU_CHECK_CONTAINER, PROGRAM
from mmd_operator.plan.triton import TritonPlan
from tests.support.examples import EXAMPLES_DIR, plan_any_example

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
KEY = "c0ffee"


def _check(
    tmp_path: Path, *, built: dict[str, str] | None, gpus: list[str] | None
) -> subprocess.CompletedProcess[str]:
    entry = tmp_path / "engines" / KEY
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text(json.dumps({"cache_key": KEY, **({"gpu": built} if built else {})}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if gpus is not None:
        smi = bin_dir / "nvidia-smi"
        lines = "\n".join(gpus)
        body = f"printf '%s\\n' '{lines}'" if gpus else "echo 'No devices were found'; exit 6"
        smi.write_text(f"#!/bin/sh\n{body}\n")
        smi.chmod(0o755)
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, str(entry), KEY],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"},
        timeout=60,
        check=False,
    )


def test_an_engine_of_the_pods_capability_passes(tmp_path: Path) -> None:
    result = _check(tmp_path, built={"name": H100, "compute_capability": "9.0"}, gpus=[f"{H100}, 9.0"])
    assert result.returncode == 0, result.stderr
    assert "built for compute capability 9.0, as this pod's GPUs" in result.stdout


def test_an_engine_of_another_capability_is_refused_naming_both(tmp_path: Path) -> None:
    result = _check(
        tmp_path, built={"name": H100, "compute_capability": "9.0"}, gpus=[f"{A100}, 8.0", f"{A100}, 8.0"]
    )
    assert result.returncode == 1
    assert f"engine {KEY} was built on {H100} (compute capability 9.0)" in result.stderr
    assert f"GPU 0 is {A100} (compute capability 8.0)" in result.stderr


def test_another_product_of_the_same_capability_passes_with_a_note(tmp_path: Path) -> None:
    result = _check(tmp_path, built={"name": H100, "compute_capability": "9.0"}, gpus=["NVIDIA H200, 9.0"])
    assert result.returncode == 0, result.stderr
    assert "same compute capability 9.0, TensorRT loads it with a warning" in result.stdout


@pytest.mark.parametrize(
    ("built", "gpus", "said"),
    [
        ({"name": "unknown", "compute_capability": "unknown"}, [f"{A100}, 8.0"], "records no GPU"),
        (None, [f"{A100}, 8.0"], "records no GPU"),
        ({"name": H100, "compute_capability": "9.0"}, None, "cannot list this pod's GPUs"),
        ({"name": H100, "compute_capability": "9.0"}, [], "nvidia-smi exited 6 (No devices were found)"),
    ],
)
def test_what_it_cannot_know_it_says_and_lets_pass(
    tmp_path: Path, built: dict[str, str] | None, gpus: list[str] | None, said: str
) -> None:
    result = _check(tmp_path, built=built, gpus=gpus)
    assert result.returncode == 0, result.stderr
    assert said in result.stdout
    assert "not compared" in result.stdout


def test_the_check_is_the_serving_pods_last_init_container() -> None:
    resource, plan = plan_any_example(EXAMPLES_DIR / "llava.yaml")
    assert isinstance(plan, TritonPlan)
    resource = resource.model_copy(update={"metadata": {**resource.metadata, "namespace": "ml", "uid": "u"}})
    (deployment,) = (
        m for m in manifests(resource, plan, config=OperatorConfig()) if m["kind"] == "Deployment"
    )
    pod = deployment["spec"]["template"]["spec"]
    check = pod["initContainers"][-1]
    assert check["name"] == GPU_CHECK_CONTAINER
    assert check["command"] == ["python3", "-c", PROGRAM, f"/engines/{plan.cache_key}", plan.cache_key]
    server = pod["containers"][0]
    assert check["resources"]["limits"]["nvidia.com/gpu"] == server["resources"]["limits"]["nvidia.com/gpu"]
