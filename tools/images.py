"""Build (and push) the project's images from its Dockerfile: `make images REGISTRY=... [PUSH=1]`.

    python -m tools.images --registry registry.example.com/ml [--push] [--tool buildah] [--dry-run]

The `operator`, `engine-builder` and `serving` targets FROM the NGC Triton image and `trtllm-serve` FROM
TensorRT-LLM's release image, with docker buildx (or buildah), tagged for the registry as the chart's
defaults are; then it prints the chart values that point at them (`--values FILE` also writes them as a
values file). Before any build, `wheelhouse/` receives the operator's and the builder's wheels and their
dependencies, so no stage that installs our packages reaches a package index for them.

The local cluster's CPU stand-ins of these images are the test bed's (`mmd_testbed.localcluster.images`),
which fills the wheelhouse and writes the chart values with the functions here. Maintainer tooling,
shipped in no distribution; imports the standard library, PyYAML and the pinned versions.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from engine_builder.versions import SERVE_TRTLLM_VERSION, TRTLLM_VERSION

Printer = Callable[[str], None]

REPO_ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.1.0"
REGISTRY_TARGETS = ("operator", "engine-builder", "serving", "trtllm-serve")
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


def registry_images(registry: str, version: str) -> dict[str, str]:
    """The real images' references under `registry` (target -> name:tag), tagged as the chart's defaults."""
    gpu_tag = f"{version}-trtllm{TRTLLM_VERSION}"
    serve_tag = f"{version}-trtllm{SERVE_TRTLLM_VERSION}"
    tags = {"operator": version, "engine-builder": gpu_tag, "serving": gpu_tag, "trtllm-serve": serve_tag}
    return {
        target: f"{registry.rstrip('/')}/{REPOSITORIES[target]}:{tags[target]}" for target in REGISTRY_TARGETS
    }


def registry_commands(
    repo_root: Path, references: dict[str, str], *, tool: str, push: bool
) -> list[list[str]]:
    """The commands that build (and push) the real images (run after `fill_wheelhouse`)."""
    context = str(repo_root)
    commands = []
    for target, name in references.items():
        if tool == "docker":
            where = "--push" if push else "--load"
            commands.append(["docker", "buildx", "build", "--target", target, "-t", name, where, context])
        else:
            commands.append(["buildah", "bud", "--target", target, "-t", name, context])
            if push:
                commands.append(["buildah", "push", name])
    return commands


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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.images",
        description="Build the operator, engine-builder, serving and trtllm-serve images for a registry.",
    )
    parser.add_argument("--registry", required=True, help="registry and path, e.g. registry.example.com/ml")
    parser.add_argument("--version", default=VERSION, help="image version (default %(default)s)")
    parser.add_argument("--push", action="store_true", help="push to --registry after building")
    parser.add_argument("--tool", choices=("docker", "buildah"), default="docker", help="the builder")
    parser.add_argument("--dry-run", action="store_true", help="print the build commands; build nothing")
    parser.add_argument(
        "--values",
        type=Path,
        metavar="FILE",
        help="also write the chart values that point at the images to FILE (helm install -f FILE)",
    )
    return parser


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Build (and push) the real images; print the chart values that point at them."""
    args = _parser().parse_args(argv)
    references = registry_images(args.registry, args.version)
    commands = registry_commands(REPO_ROOT, references, tool=args.tool, push=args.push)
    if args.dry_run:
        for command in commands:
            print(" ".join(command))
    else:
        try:
            fill_wheelhouse(REPO_ROOT, _say)
        except ImageBuildError as error:
            print(f"images: {error}", file=sys.stderr)
            return 1
        for command in commands:
            _say(f"--> {' '.join(command)}")
            if subprocess.run(command, check=False).returncode != 0:
                print(f"images: `{' '.join(command)}` failed", file=sys.stderr)
                return 1
    print_values(references, args.values, _say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
