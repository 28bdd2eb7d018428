"""The real-pod tier: the local control plane with real nodes, the project's images, the operator's chart.

Right after collection, if any test of this tier was selected (outside the per-test timeout, with live
progress): the host is checked (a missing prerequisite fails the tier with the reason, never a skip), the
control plane and node binaries are built or found in the cache, and the Dockerfile's `operator`,
`engine-builder-cpu`, `serving-cpu` and `trtllm-serve-cpu` images are built. The session (under `make
test`, each of the tier's two xdist groups) then starts one cluster with two real nodes (kubelet,
containerd, runc, CNI, kube-proxy, kube-router, CoreDNS, local-path-provisioner) and no kwok node,
imports the images into both nodes, starts the Hub double (`localcluster.hub`: synthetic snapshots of the
trtllm-serve examples' repositories, served from a pod of the builder image), and installs the chart into
`mmd-system` under Pod Security `restricted`, pointed at the local images and at that Hub: the operator
runs as a real pod on its ServiceAccount token alone. Each test gets a fresh `restricted` namespace.

Nothing here reaches beyond this machine: pods and Services live on the cluster's private /16, which the
host reaches over its bridge (a Service through the first node's kube-proxy).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from PIL import Image

from mmd_testbed.localcluster import hub, images, monitoring, realnodes
from mmd_testbed.localcluster.binaries import ensure_binaries
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.fakegpu import ensure_fake_gpu
from mmd_testbed.localcluster.image_build import chart_values
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.nodebinaries import ensure_node_binaries
from mmd_testbed.localcluster.objects import NodePool
from mmd_testbed.localcluster.state import REAL_NODE_PREFIX
from tests.support.kube import POD_SECURITY, Kube, Resources, Tools, new_namespace
from tests.support.progress import terminal_printer

_TIER = Path(__file__).parent
REPO = _TIER.parents[1]
CHART = REPO / "charts" / "mmd-operator"
OPERATOR_NAMESPACE = "mmd-system"
REAL_NODES = 2
GPUS_PER_NODE = 8
_BUILT: dict[str, images.BuiltImage] = {}


def _wants_pods(session: pytest.Session) -> bool:
    return any(_TIER in Path(str(item.path)).parents for item in session.items)


def pytest_collection_finish(session: pytest.Session) -> None:
    if not _wants_pods(session):
        return
    problems = realnodes.preflight()
    if problems:
        raise pytest.UsageError("the real-pod tier cannot run here: " + "; ".join(problems))
    say = terminal_printer(session.config)
    layout = Layout.discover()
    ensure_binaries(layout, say=say)
    ensure_node_binaries(layout, say=say)
    ensure_fake_gpu(layout, say=say)
    _BUILT.update(images.build_local(layout, say))


@pytest.fixture(scope="session")
def say(pytestconfig: pytest.Config) -> Callable[[str], None]:
    return terminal_printer(pytestconfig)


@pytest.fixture(scope="session")
def built_images() -> dict[str, images.BuiltImage]:
    """The local images of this session (operator and the CPU stand-ins)."""
    if not _BUILT:
        _BUILT.update(images.build_local(Layout.discover(), print))
    return _BUILT


def _short_cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster's directory, as short as the session allows: containerd refuses a socket path over 104
    bytes, and an xdist worker's own directory (`.../pytest-N/popen-gwK/`) leaves too little of them. The
    session's numbered directory is still pytest's, so dead sessions' mounts are found there."""
    base = tmp_path_factory.getbasetemp()
    if base.name.startswith("popen-"):
        base = base.parent
    # One per worker: the tier runs as two xdist groups, each with a cluster of its own.
    directory = base / f"real-nodes-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    directory.mkdir()
    return directory


@pytest.fixture(scope="session")
def real_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    say: Callable[[str], None],
    built_images: dict[str, images.BuiltImage],
) -> Iterator[LocalCluster]:
    cluster = LocalCluster(_short_cluster_dir(tmp_path_factory), say=say, bind_to_parent=True)
    try:
        cluster.up(
            NodePool(count=0),
            real_nodes=NodePool(count=REAL_NODES, gpus_per_node=GPUS_PER_NODE, name_prefix=REAL_NODE_PREFIX),
        )
        say(f"--> importing {len(built_images)} images into {REAL_NODES} nodes")
        cluster.load_images([image.archive for image in built_images.values()])
        with cluster.api_client() as api_client:
            hub.deploy(api_client, built_images["engine-builder-cpu"].name, say)
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="session")
def api_client(real_cluster: LocalCluster) -> Iterator[k8s.ApiClient]:
    with real_cluster.api_client() as client:
        yield client


@pytest.fixture(scope="session")
def kube(api_client: k8s.ApiClient) -> Kube:
    return Kube.of(api_client)


@pytest.fixture(scope="session")
def tools(real_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Tools:
    binaries = ensure_binaries(Layout.discover(), say=print)
    home = tmp_path_factory.mktemp("tools-home")
    return Tools.for_cluster(binaries.bin_dir, real_cluster.kubeconfig, home)


@pytest.fixture(scope="session")
def operator_release(
    kube: Kube, tools: Tools, api_client: k8s.ApiClient, built_images: dict[str, images.BuiltImage]
) -> dict[str, Any]:
    """The chart installed as a user would (`helm install --wait`), pointed at the local images and Hub."""
    kube.core.create_namespace({"metadata": {"name": OPERATOR_NAMESPACE, "labels": POD_SECURITY}})
    references = {target: image.name for target, image in built_images.items()}
    values = [argument for value in chart_values(references, hub.ENDPOINT) for argument in ("--set", value)]
    tools.run(
        "helm", "install", "mmd-operator", str(CHART), "-n", OPERATOR_NAMESPACE, *values,
        # Tests fix and create things within seconds; look again that soon.
        "--set", "retrySeconds=2",
        # A canary's analysis asks the metrics path's Prometheus, where a test starts it.
        "--set", f"prometheusUrl={monitoring.PROMETHEUS_URL}",
        "--wait", "--timeout", "180s", timeout=240,
    )  # fmt: skip
    return {"namespace": OPERATOR_NAMESPACE, "images": references}


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kube: Kube, operator_release: dict[str, Any]) -> Iterator[str]:
    """A fresh namespace enforcing Pod Security `restricted`, with its default ServiceAccount."""
    name = new_namespace(kube, request.node.name)
    yield name
    kube.core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def resources(api_client: k8s.ApiClient, kube: Kube, namespace: str) -> Resources:
    return Resources(kube=kube, custom=k8s.CustomObjectsApi(api_client), namespace=namespace)


@pytest.fixture(scope="session")
def picture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small red PNG, the image of every request to a vision model here."""
    path = tmp_path_factory.mktemp("picture") / "red.png"
    Image.new("RGB", (32, 32), (200, 10, 10)).save(path)
    return path
