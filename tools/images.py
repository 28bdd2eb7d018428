"""Build (and push) the project's images from its Dockerfile: `make images REGISTRY=... [PUSH=1]`.

    python -m tools.images --registry registry.example.com/ml [--push] [--tool buildah] [--dry-run]

The `operator` target (FROM a slim Python image), `engine-builder` and `serving` FROM the NGC Triton image
(once per engine-path release: the default's are the chart's, the others' are what a resource naming
`engine.tensorrtLlmVersion` runs) and `trtllm-serve` FROM TensorRT-LLM's release image, with docker
buildx (or buildah), tagged for the registry as the chart's defaults are; then it prints the chart values
that point at them (`--values FILE` also writes them as a values file). Before any build, `wheelhouse/`
receives the operator's and the builder's wheels and their dependencies, so no stage that installs our
packages reaches a package index for them.

The local cluster's CPU stand-ins of these images are the test bed's (`mmd_testbed.localcluster.images`);
both fill the wheelhouse and print the chart values with the test bed's `image_build`. Maintainer
tooling, shipped in no distribution; imports the standard library, the pinned versions and `image_build`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from engine_builder.versions import (
    DEFAULT_ENGINE_RELEASE,
    ENGINE_RELEASES,
    SERVE_TRTLLM_VERSION,
    TRTLLM_VERSION,
)
from mmd_testbed.localcluster.image_build import REPOSITORIES, ImageBuildError, fill_wheelhouse, print_values

REPO_ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.1.0"
REGISTRY_TARGETS = ("operator", "engine-builder", "serving", "trtllm-serve")


def registry_images(registry: str, version: str) -> dict[str, str]:
    """The real images' references under `registry` (target -> name:tag), tagged as the chart's defaults."""
    gpu_tag = f"{version}-trtllm{TRTLLM_VERSION}"
    serve_tag = f"{version}-trtllm{SERVE_TRTLLM_VERSION}"
    tags = {"operator": version, "engine-builder": gpu_tag, "serving": gpu_tag, "trtllm-serve": serve_tag}
    return {
        target: f"{registry.rstrip('/')}/{REPOSITORIES[target]}:{tags[target]}" for target in REGISTRY_TARGETS
    }


def release_images(registry: str, version: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """The engine path's other releases' engine-builder and serving images: (target, reference, arguments).

    Built from the same stages with their row's build arguments, tagged with their version.
    """
    builds: list[tuple[str, str, tuple[str, ...]]] = []
    for release in ENGINE_RELEASES.values():
        if release is DEFAULT_ENGINE_RELEASE:
            continue
        arguments = (
            f"TRITON_TAG={release.triton}",
            f"TRTLLM_VERSION={release.tensorrt_llm}",
            f"TEMPLATE_TAG={release.template_tag}",
            f"TEMPLATE_REPOSITORY={release.template_repository}",
            f"TEMPLATE_DIR={release.template_dir}",
        )
        tag = f"{version}-trtllm{release.tensorrt_llm}"
        for target in ("engine-builder", "serving"):
            builds.append((target, f"{registry.rstrip('/')}/{REPOSITORIES[target]}:{tag}", arguments))
    return builds


def registry_commands(
    repo_root: Path,
    references: dict[str, str],
    *,
    tool: str,
    push: bool,
    releases: Sequence[tuple[str, str, tuple[str, ...]]] = (),
) -> list[list[str]]:
    """The commands that build (and push) the real images (run after `fill_wheelhouse`).

    First `references`, then the other releases' (`release_images`).
    """
    context = str(repo_root)
    commands = []
    builds = [(target, name, ()) for target, name in references.items()] + list(releases)
    for target, name, arguments in builds:
        flags = [part for argument in arguments for part in ("--build-arg", argument)]
        if tool == "docker":
            where = "--push" if push else "--load"
            commands.append(
                ["docker", "buildx", "build", "--target", target, *flags, "-t", name, where, context]
            )
        else:
            commands.append(["buildah", "bud", "--target", target, *flags, "-t", name, context])
            if push:
                commands.append(["buildah", "push", name])
    return commands


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
    releases = release_images(args.registry, args.version)
    commands = registry_commands(REPO_ROOT, references, tool=args.tool, push=args.push, releases=releases)
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
