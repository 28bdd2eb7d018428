"""`python -m mmd_testbed`: the test bed's command line, for contributors (docs/development/local-cluster.md).

    python -m mmd_testbed cluster up | down | status | kubeconfig | build     the local Kubernetes cluster
    python -m mmd_testbed images build [--load] [--values FILE]             the CPU stand-in images

A thin shell over `mmd_testbed.localcluster`. `images build --load` imports the images into the running
cluster's real nodes and (re)starts its Hub double with the builder image (`localcluster.hub`); the chart
values it prints then point the weights downloads at it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mmd_testbed.localcluster import hub, images
from mmd_testbed.localcluster.binaries import BuildError, ensure_binaries
from mmd_testbed.localcluster.cluster import ClusterError, LocalCluster
from mmd_testbed.localcluster.fakegpu import ensure_fake_gpu
from mmd_testbed.localcluster.image_build import ImageBuildError, print_values
from mmd_testbed.localcluster.layout import Layout, LayoutError, default_state_dir
from mmd_testbed.localcluster.lwsbinaries import ensure_lws_binaries
from mmd_testbed.localcluster.metricsbinaries import ensure_metrics_binaries
from mmd_testbed.localcluster.network import NetworkError
from mmd_testbed.localcluster.nodebinaries import ensure_node_binaries
from mmd_testbed.localcluster.objects import GPU_MODELS, NodePool
from mmd_testbed.localcluster.ocilayout import ImageLoadError
from mmd_testbed.localcluster.realnodes import NodeStartError
from mmd_testbed.localcluster.state import REAL_NODE_PREFIX

# `status` exit codes: everything healthy, something dead or unhealthy, nothing started.
EXIT_HEALTHY, EXIT_DEGRADED, EXIT_NOT_RUNNING = 0, 1, 3


def _register_cluster(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "cluster",
        help="local control plane (etcd, API server, controller manager, scheduler, kwok GPU nodes)",
        description="Run a real Kubernetes control plane as local processes, with fake GPU nodes.",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="runtime directory (default: $MMD_CLUSTER_DIR or .local/cluster in the checkout)",
    )
    actions = parser.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")

    up = actions.add_parser("up", help="build the binaries if needed, start, wait for Ready nodes")
    up.add_argument("--nodes", type=int, default=NodePool.count, help="fake GPU nodes (default %(default)s)")
    up.add_argument("--gpus-per-node", type=int, default=NodePool.gpus_per_node, help="default %(default)s")
    up.add_argument("--gpu-model", choices=sorted(GPU_MODELS), default=NodePool.gpu_model)
    up.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        help="real nodes (kubelet, containerd, runc, CNI, kube-proxy, kube-router) beside kwok's (default 0)",
    )
    up.add_argument(
        "--real-gpus-per-node",
        type=int,
        default=8,
        help="nvidia.com/gpu each real node advertises (default 8)",
    )
    up.add_argument(
        "--real-gpu-models",
        type=lambda value: tuple(value.split(",")),
        default=(),
        metavar="MODEL,...",
        help=f"one GPU model per real node, in order (of {', '.join(sorted(GPU_MODELS))}); "
        "default: --gpu-model on every node",
    )
    up.add_argument(
        "--metrics",
        action="store_true",
        help="after the real nodes, Prometheus and prometheus-adapter (custom.metrics.k8s.io) as pods, "
        "so HorizontalPodAutoscalers scale on the serving pods' metrics (docs/development/local-cluster.md)",
    )
    up.add_argument(
        "--lws",
        action="store_true",
        help="after the real nodes, the LeaderWorkerSet controller (leaderworkerset.x-k8s.io) as a pod, "
        "built from its Go module (docs/development/local-cluster.md)",
    )
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each step")
    up.set_defaults(handler=_up)

    down = actions.add_parser("down", help="stop every component")
    down.set_defaults(handler=_down)

    status = actions.add_parser("status", help="show each component; exit 1 if one is dead, 3 if not up")
    status.set_defaults(handler=_status)

    kubeconfig = actions.add_parser("kubeconfig", help="print the kubeconfig path")
    kubeconfig.add_argument(
        "--shell", action="store_true", help="print `export` lines for KUBECONFIG and PATH (kubectl, helm)"
    )
    kubeconfig.set_defaults(handler=_kubeconfig)

    build = actions.add_parser("build", help="only build (or find) the cached binaries and print where")
    build.add_argument(
        "--nodes",
        action="store_true",
        help="also the real nodes' binaries (kubelet, containerd, CNI, add-ons)",
    )
    build.add_argument(
        "--metrics",
        action="store_true",
        help="also the metrics path's binaries (Prometheus, prometheus-adapter)",
    )
    build.add_argument("--lws", action="store_true", help="also the LeaderWorkerSet controller")
    build.set_defaults(handler=_build)


def _say(line: str) -> None:
    print(line, flush=True)


def _cluster(args: argparse.Namespace) -> LocalCluster:
    layout = Layout.discover()
    state_dir = args.dir or default_state_dir(layout.repo_root)
    return LocalCluster(state_dir, layout, say=_say)


def _up(args: argparse.Namespace) -> int:
    pool = NodePool(count=args.nodes, gpus_per_node=args.gpus_per_node, gpu_model=args.gpu_model)
    real = NodePool(
        count=args.real_nodes,
        gpus_per_node=args.real_gpus_per_node,
        gpu_model=args.gpu_model,
        name_prefix=REAL_NODE_PREFIX,
        gpu_models=args.real_gpu_models,
    )
    try:
        _cluster(args).up(pool, timeout=args.timeout, real_nodes=real, metrics=args.metrics, lws=args.lws)
    except (ClusterError, BuildError, LayoutError, NodeStartError, NetworkError, ImageLoadError) as error:
        print(f"python -m mmd_testbed cluster up: {error}", file=sys.stderr)
        return 1
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    stopped = cluster.down()
    _say(f"==> stopped {len(stopped)} component(s); logs kept in {cluster.logs_dir}")
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    status = cluster.status()
    if not status.recorded:
        _say(f"no cluster recorded in {cluster.state_dir} (run `python -m mmd_testbed cluster up`)")
        return EXIT_NOT_RUNNING
    _say(f"cluster in {cluster.state_dir}: {status.server}")
    _say(f"{'COMPONENT':<25} {'PID':>8}  {'STATE':<10} DETAIL")
    for component in status.components:
        state = "healthy" if component.healthy else ("unhealthy" if component.running else "dead")
        pid = str(component.pid) if component.pid is not None else "-"
        _say(f"{component.name:<25} {pid:>8}  {state:<10} {component.detail}")
    if status.nodes_total is not None:
        _say(f"nodes: {status.nodes_ready}/{status.nodes_total} Ready")
    return EXIT_HEALTHY if status.healthy else EXIT_DEGRADED


def _kubeconfig(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if not cluster.kubeconfig.is_file():
        print(f"no kubeconfig in {cluster.state_dir} (run `make cluster-up`)", file=sys.stderr)
        return EXIT_NOT_RUNNING
    if args.shell:
        state = cluster.load_state()
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        if state is not None:
            print(f"export PATH={Path(state.binaries) / 'bin'}:$PATH")
    else:
        print(cluster.kubeconfig)
    return 0


def _build(args: argparse.Namespace) -> int:
    try:
        binaries = ensure_binaries(Layout.discover(), say=_say)
        print(binaries.bin_dir)
        if args.nodes:
            print(ensure_node_binaries(Layout.discover(), say=_say).bin_dir)
            print(ensure_fake_gpu(Layout.discover(), say=_say))
        if args.metrics:
            print(ensure_metrics_binaries(Layout.discover(), say=_say).bin_dir)
        if args.lws:
            print(ensure_lws_binaries(Layout.discover(), say=_say).root)
    except (BuildError, LayoutError) as error:
        print(f"python -m mmd_testbed cluster build: {error}", file=sys.stderr)
        return 1
    return 0


def _register_images(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "images", help="the operator and the CPU stand-ins of the other images, as OCI archives (buildah)"
    )
    actions = parser.add_subparsers(dest="images_command", required=True, metavar="ACTION")
    build = actions.add_parser("build", help="build the local images (and load them into the cluster)")
    build.add_argument(
        "--load",
        action="store_true",
        help="import into the local cluster's real nodes and start its Hub double with them",
    )
    build.add_argument("--dir", type=Path, help="with --load: the local cluster's directory")
    build.add_argument(
        "--values",
        type=Path,
        metavar="FILE",
        help="also write the chart values that point at the images to FILE (helm install -f FILE)",
    )
    build.set_defaults(handler=_images)


def _images(args: argparse.Namespace) -> int:
    try:
        layout = Layout.discover()
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
    except (ImageBuildError, LayoutError, ClusterError, ImageLoadError, TimeoutError) as error:
        print(f"images build: {error}", file=sys.stderr)
        return 1
    print_values(references, args.values, _say, endpoint)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the test bed's command line with `argv`; return its exit code."""
    parser = argparse.ArgumentParser(prog="python -m mmd_testbed", description=__doc__.split("\n\n")[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _register_cluster(subparsers)
    _register_images(subparsers)
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)
