"""What building any of the project's images needs: the real ones (`make images`) and the CPU stand-ins.

The images' repository names, the wheelhouse of our distributions' wheels and their dependencies
(`fill_wheelhouse`), a build step that says what failed (`run`, `ImageBuildError`), and the chart values
that point the chart at built images (`chart_values`, `print_values`). The CPU stand-ins (`images`) and
the maintainers' build of the real images (`tools/images.py`) both use it. Imports the standard library
and PyYAML.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

Printer = Callable[[str], None]

# Repository names under a registry (and under localhost/mmd-operator for the local CPU stand-ins).
REPOSITORIES = {
    "operator": "operator",
    "engine-builder": "engine-builder",
    "serving": "serving",
    "trtllm-serve": "trtllm-serve",
    "engine-builder-cpu": "engine-builder",
    "serving-cpu": "serving",
    "trtllm-serve-cpu": "trtllm-serve",
}
# The chart value of each image (the operator's image is `image.repository` and `image.tag`).
CHART_IMAGE_VALUES = {
    "engine-builder": "images.engineBuilder",
    "serving": "images.serving",
    "trtllm-serve": "images.trtllmServe",
}
# The distributions the real images install, by their source directories (the operator depends on the
# builder's formats; the builder image installs the builder alone).
PRODUCT_DISTRIBUTIONS = ("engine_builder", "operator")


class ImageBuildError(RuntimeError):
    """A build step failed; the message names the step and what its tool said."""


def run(command: Sequence[str], what: str, *, cwd: Path | None = None) -> str:
    """Run `command`; on failure raise `ImageBuildError` with its last lines of output."""
    result = subprocess.run(list(command), capture_output=True, text=True, cwd=cwd, check=False)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip().splitlines()
        raise ImageBuildError(
            f"{what} failed (exit {result.returncode}): {' '.join(command[:4])} ...\n"
            + "\n".join(output[-25:])
        )
    return result.stdout


def fill_wheelhouse(
    repo_root: Path, say: Printer, *, distributions: Sequence[str] = PRODUCT_DISTRIBUTIONS
) -> Path:
    """Put the wheels of `distributions` (source directories) and their dependencies into `wheelhouse/`."""
    wheelhouse = repo_root / "wheelhouse"
    if wheelhouse.exists():
        for stale in wheelhouse.iterdir():
            stale.unlink()
    wheelhouse.mkdir(exist_ok=True)
    started = time.monotonic()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    # Built or downloaded as wheels together, so each finds the others here (pip's cache makes it quick).
    sources = [str(repo_root / name) for name in distributions]
    run([*pip, "wheel", "--wheel-dir", str(wheelhouse), *sources], "pip wheel of the project")
    wheels = sorted(wheelhouse.glob("*.whl"))
    size = sum(wheel.stat().st_size for wheel in wheels)
    say(f"    wheelhouse: {len(wheels)} wheels, {size / 1e6:.0f} MB in {time.monotonic() - started:.0f} s")
    return wheelhouse


def chart_values(images: dict[str, str], hf_endpoint: str | None = None) -> list[str]:
    """The `helm install --set` arguments that point the chart at `images` (target -> reference).

    A CPU stand-in counts as the image it stands in for. `hf_endpoint` is the Hub the weights downloads
    talk to (the local cluster's Hub double for the local images), when given.
    """
    repository, _, tag = images["operator"].rpartition(":")
    values = [f"image.repository={repository}", f"image.tag={tag}"]
    for target, reference in images.items():
        value = CHART_IMAGE_VALUES.get(target.removesuffix("-cpu"))
        if value is not None:
            values.append(f"{value}={reference}")
    if hf_endpoint is not None:
        values.append(f"hfEndpoint={hf_endpoint}")
    return values


def chart_values_document(images: dict[str, str], hf_endpoint: str | None = None) -> dict[str, Any]:
    """The same values as `chart_values`, as the nested mapping of a Helm values file."""
    document: dict[str, Any] = {}
    for assignment in chart_values(images, hf_endpoint):
        path, _, value = assignment.partition("=")
        *parents, leaf = path.split(".")
        node = document
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return document


def print_values(
    references: dict[str, str], values_file: Path | None, say: Printer, hf_endpoint: str | None = None
) -> None:
    """Say how to install the chart with `references` (and write them to `values_file`, if given)."""
    if values_file is not None:
        document = chart_values_document(references, hf_endpoint)
        values_file.write_text(yaml.safe_dump(document, sort_keys=False))
        say(f"==> wrote the chart values to {values_file}: helm install ... -f {values_file}")
    say("==> install the chart with these images:")
    say("    helm install mmd-operator charts/mmd-operator -n mmd-system --create-namespace \\")
    values = chart_values(references, hf_endpoint)
    for index, value in enumerate(values):
        say(f"      --set {value}" + (" \\" if index < len(values) - 1 else ""))
