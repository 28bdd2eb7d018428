"""`mmctl images build`: the project's images from its Dockerfile, for a registry or for the local cluster.

A thin shell over `mmd_operator.cli.localcluster.images` (docs/real-pods.md):

    mmctl images build --registry registry.example.com/ml --push     # operator, engine-builder, serving,
                                                                     # trtllm-serve
    mmctl images build --local [--load]                              # operator and the CPU stand-ins

`--load` also (re)starts the local cluster's Hub double with the loaded builder image (`localcluster.hub`),
and the chart values then point the weights downloads at it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml

from mmd_operator.cli.localcluster import hub, images
from mmd_operator.cli.localcluster.cluster import ClusterError, LocalCluster
from mmd_operator.cli.localcluster.layout import Layout, LayoutError, default_state_dir
from mmd_operator.cli.localcluster.ocilayout import ImageLoadError


def register(subparsers: Any) -> None:
    """Add the `images` sub-command to `subparsers`."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "images",
        help="build the operator, engine-builder, serving and trtllm-serve images from the Dockerfile",
        description="Build the project's images for a registry (NGC-based) or for the local cluster (CPU).",
    )
    actions = parser.add_subparsers(dest="images_command", required=True, metavar="ACTION")
    build = actions.add_parser(
        "build", help="build the images (and push them, or load them into the cluster)"
    )
    where = build.add_mutually_exclusive_group(required=True)
    where.add_argument("--registry", help="registry and path to tag for, e.g. registry.example.com/ml")
    where.add_argument(
        "--local", action="store_true", help="the operator and the CPU stand-ins, as OCI archives (buildah)"
    )
    build.add_argument(
        "--version", default=version("mmd-operator"), help="image version (default %(default)s)"
    )
    build.add_argument("--push", action="store_true", help="push to --registry after building")
    build.add_argument(
        "--tool", choices=("docker", "buildah"), default="docker", help="builder for --registry"
    )
    build.add_argument("--dry-run", action="store_true", help="print the build commands; build nothing")
    build.add_argument(
        "--load",
        action="store_true",
        help="with --local: import into the local cluster's nodes and start its Hub double with them",
    )
    build.add_argument("--dir", type=Path, help="with --load: the local cluster's directory")
    build.add_argument(
        "--values",
        type=Path,
        metavar="FILE",
        help="also write the chart values that point at the images to FILE (helm install -f FILE)",
    )
    build.set_defaults(handler=_build)


def _say(line: str) -> None:
    print(line, flush=True)


def _build(args: argparse.Namespace) -> int:
    try:
        layout = Layout.discover()
        if args.local:
            return _local(args, layout)
        return _registry(args, layout)
    except (images.ImageBuildError, LayoutError, ClusterError, ImageLoadError, TimeoutError) as error:
        print(f"mmctl images build: {error}", file=sys.stderr)
        return 1


def _local(args: argparse.Namespace, layout: Layout) -> int:
    built = images.build_local(layout, _say)
    references = {target: image.name for target, image in built.items()}
    endpoint = None
    if args.load:
        cluster = LocalCluster(args.dir or default_state_dir(layout.repo_root), layout, say=_say)
        cluster.load_images([image.archive for image in built.values()])
        _say(f"==> loaded into every real node of {cluster.state_dir}")
        with cluster.api_client() as api_client:
            hub.deploy(api_client, references["engine-builder-cpu"], _say)
        endpoint = hub.ENDPOINT
    _print_values(references, args.values, endpoint)
    return 0


def _registry(args: argparse.Namespace, layout: Layout) -> int:
    references = images.registry_images(args.registry, args.version)
    commands = images.registry_commands(layout, references, tool=args.tool, push=args.push)
    if args.dry_run:
        for command in commands:
            print(" ".join(command))
    else:
        images.fill_wheelhouse(layout, cpu=False, say=_say)
        for command in commands:
            _say(f"--> {' '.join(command)}")
            if subprocess.run(command, check=False).returncode != 0:
                print(f"mmctl images build: `{' '.join(command)}` failed", file=sys.stderr)
                return 1
    _print_values(references, args.values)
    return 0


def _print_values(
    references: dict[str, str], values_file: Path | None, hf_endpoint: str | None = None
) -> None:
    if values_file is not None:
        document = images.chart_values_document(references, hf_endpoint)
        values_file.write_text(yaml.safe_dump(document, sort_keys=False))
        _say(f"==> wrote the chart values to {values_file}: helm install ... -f {values_file}")
    _say("==> install the chart with these images:")
    _say("    helm install mmd-operator charts/mmd-operator -n mmd-system --create-namespace \\")
    values = images.chart_values(references, hf_endpoint)
    for index, value in enumerate(values):
        _say(f"      --set {value}" + (" \\" if index < len(values) - 1 else ""))
