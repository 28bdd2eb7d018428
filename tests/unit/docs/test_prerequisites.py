"""docs/prerequisites.md against the code: the versions it says are pinned and tested are the pins."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from engine_builder import versions
from mmd_operator.config import OperatorConfig
from mmd_testbed.localcluster.layout import Layout

ROOT = Path(__file__).resolve().parents[3]
PAGE = (ROOT / "docs" / "prerequisites.md").read_text()
LAYOUT = Layout(repo_root=ROOT, cache_root=ROOT / ".no-cache")


def _section(title: str) -> str:
    return PAGE.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _pinned_table() -> dict[str, str]:
    rows = [
        line for line in _section("What this release pins and tests").splitlines() if line.startswith("| ")
    ]
    return {cells[0]: cells[1] for cells in (row.strip("| ").split(" | ") for row in rows[1:])}


def _minimum_python() -> str:
    required = tomllib.loads((ROOT / "cli" / "pyproject.toml").read_text())["project"]["requires-python"]
    assert required.startswith(">="), required
    return required.removeprefix(">=")


def _operator_base() -> str:
    match = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert match is not None
    return match.group(1)


def test_the_pinned_table_says_what_the_code_pins() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "mmd-operator" / "Chart.yaml").read_text())
    tested, metrics, config = LAYOUT.versions, LAYOUT.metrics_versions, OperatorConfig()
    cache = f"{config.engine_cache_size}, {config.engine_cache_access_mode}"
    assert _pinned_table() == {
        "Kubernetes, tested": f"{tested.kubernetes.lstrip('v')} (the test bed's control plane and kubelets)",
        "Kubernetes, the chart's `kubeVersion`": chart["kubeVersion"],
        "Helm, tested": tested.helm.lstrip("v"),
        "LeaderWorkerSet controller, tested": LAYOUT.lws_versions.lws.lstrip("v"),
        "Prometheus and prometheus-adapter, tested": (
            f"{metrics.prometheus_release} and {metrics.prometheus_adapter.lstrip('v')}"
        ),
        "engine-builder and serving images' base": (
            f"`{versions.BASE_IMAGE}` (TensorRT-LLM {versions.TRTLLM_VERSION})"
        ),
        "trtllm-serve image's base": (
            f"`{versions.SERVE_BASE_IMAGE}` (TensorRT-LLM {versions.SERVE_TRTLLM_VERSION})"
        ),
        "the operator image's base": f"`{_operator_base()}`",
        "Python for `mmctl` and the operator": f"{_minimum_python()} or later",
        "default engine cache": f"{cache}, the cluster's default StorageClass",
    }


def test_the_minimum_kubernetes_is_the_charts() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "mmd-operator" / "Chart.yaml").read_text())
    minimum = re.fullmatch(r">=(\d+\.\d+)\.0-0", chart["kubeVersion"])
    assert minimum is not None
    assert f"**{minimum.group(1)} or later.**" in _section("Kubernetes")


def test_the_driver_and_architecture_tables_name_the_pinned_images_and_versions() -> None:
    drivers = _section("The driver each image needs")
    assert f"`{versions.BASE_IMAGE}`: TensorRT-LLM {versions.TRTLLM_VERSION}" in drivers
    assert f"`{versions.SERVE_BASE_IMAGE}`: TensorRT-LLM {versions.SERVE_TRTLLM_VERSION}" in drivers
    triton_tag = versions.BASE_IMAGE.split(":")[1].split("-")[0]
    architectures = _section("GPU architectures per runtime")
    assert f"(TensorRT-LLM {versions.TRTLLM_VERSION} in Triton {triton_tag})" in architectures
    assert f"(TensorRT-LLM {versions.SERVE_TRTLLM_VERSION})" in architectures


def test_python_for_mmctl_is_what_every_distribution_requires() -> None:
    for distribution in ("cli", "operator", "engine_builder"):
        project = tomllib.loads((ROOT / distribution / "pyproject.toml").read_text())["project"]
        assert project["requires-python"] == f">={_minimum_python()}"
    assert f"**Python {_minimum_python()} or later**" in _section("Python for mmctl")
    assert _operator_base() == f"python:{_minimum_python()}-slim"


def test_the_leaderworkerset_version_the_other_pages_name_is_the_pin() -> None:
    pinned = LAYOUT.lws_versions.lws
    for page in ("docs/multi-node.md", "charts/mmd-operator/README.md"):
        named = re.findall(r"tested with (v[\d.]+)\)", (ROOT / page).read_text())
        assert named == [pinned], page
