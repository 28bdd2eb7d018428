"""The real nodes' fake GPUs reach containers as a GPU node's do: through the kubelet's device manager.

A cluster of its own (the session's nodes share one GPU model): two real nodes of two kinds, an A100
(compute capability 8.0) and an H100 (9.0), two GPUs each, with nothing but the serving stand-in image.
Each node's `nvidia.com/gpu` comes from its device plugin double (`localcluster.fakegpu`), registered with
its kubelet; a pod given a GPU on either node runs the image's `nvidia-smi` and lists that node's GPU; a
pod given none finds no devices; a killed plugin takes the node's GPUs out of its allocatable, and a node
lost and revived has them again. The same plugin is the DRA driver `gpu.nvidia.com`: each node's
ResourceSlice lists its GPUs with NVIDIA's attributes, and a claim that selects a compute capability gets
a GPU of that kind, on the node that has it, whose nvidia-smi lists it (injected through CDI).
"""

from __future__ import annotations

import os
import shutil
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from mmd_operator.vocabulary.kinds import GPU_RESOURCE
from mmd_testbed.localcluster import fakegpu, images, nodes, processes
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.nodes import RealNode
from mmd_testbed.localcluster.objects import GPU_MODELS, NodePool
from mmd_testbed.localcluster.state import REAL_NODE_PREFIX
from tests.support.kube import Kube

pytestmark = pytest.mark.pods

POOL = NodePool(count=2, gpus_per_node=2, gpu_models=("a100-80gb", "h100-80gb"), name_prefix=REAL_NODE_PREFIX)
NODES = dict(zip(POOL.node_names(), (POOL.model_of(0), POOL.model_of(1)), strict=True))
QUERY = ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"]
NAMESPACE = "default"


@pytest.fixture(scope="module")
def two_kinds(
    say: Callable[[str], None],
    built_images: dict[str, images.BuiltImage],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalCluster]:
    """A cluster with an A100 node and an H100 node, and the serving stand-in image on both."""
    # In the session's own directory (the logs stay, as the session cluster's do), not a worker's: the nodes'
    # sockets (containerd's, the GPU plugin's) must fit in 104 bytes.
    base = tmp_path_factory.getbasetemp()
    base = base.parent if base.name.startswith("popen-") else base
    directory = base / f"gpu-kinds-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    directory.mkdir()
    cluster = LocalCluster(directory, say=say, bind_to_parent=True)
    try:
        cluster.up(NodePool(count=0), real_nodes=POOL)
        cluster.load_images([built_images["serving-cpu"].archive])
        yield cluster
    finally:
        cluster.down()
        # What the nodes hold (image layers, volumes) goes; the logs stay.
        shutil.rmtree(directory / "nodes", ignore_errors=True)


@pytest.fixture(scope="module")
def kube(two_kinds: LocalCluster) -> Iterator[Kube]:
    with two_kinds.api_client() as api_client:
        yield Kube.of(api_client)


def _pod(name: str, image: str, node: str, gpus: int) -> dict[str, Any]:
    limits = {GPU_RESOURCE: str(gpus)} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            # As the operator pins a GPU kind: by GPU feature discovery's product label.
            "nodeSelector": {"nvidia.com/gpu.product": NODES[node].product},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "nvidia-smi",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": QUERY,
                    "resources": {"limits": limits},
                }
            ],
        },
    }


def _finished(kube: Kube, name: str) -> Any:
    pod = kube.core.read_namespaced_pod(name, NAMESPACE)
    return pod if pod.status.phase in ("Succeeded", "Failed") else None


def _run(kube: Kube, pods: list[dict[str, Any]]) -> dict[str, tuple[Any, str]]:
    """Run `pods` at once; return each one's finished pod and log, by name."""
    for body in pods:
        kube.core.create_namespaced_pod(NAMESPACE, body)
    finished = {}
    for body in pods:
        name = body["metadata"]["name"]
        pod = kube.wait_for(f"pod {name} to finish", lambda name=name: _finished(kube, name), timeout=120)
        # A pod the kubelet refused at admission has no container, hence no log.
        log = "" if pod.status.reason else kube.core.read_namespaced_pod_log(name, NAMESPACE)
        finished[name] = (pod, log)
        kube.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    return finished


def _allocatable_gpus(kube: Kube, node: str) -> str:
    return str((kube.core.read_node(node).status.allocatable or {}).get(GPU_RESOURCE, "0"))


def test_each_node_has_the_gpus_its_device_plugin_registered_with_its_kubelet(
    two_kinds: LocalCluster, kube: Kube
) -> None:
    state = two_kinds.load_state()
    assert state is not None and state.network is not None
    for ordinal, (name, model) in enumerate(NODES.items()):
        # The plugin's health: a kubelet watches its devices.
        url = nodes.health_url(RealNode(name, ordinal, two_kinds.state_dir, state.network), "fake-gpu")
        assert url is not None
        with urllib.request.urlopen(url, timeout=5) as health:
            assert health.status == 200
        node = kube.core.read_node(name)
        assert node.status.capacity[GPU_RESOURCE] == node.status.allocatable[GPU_RESOURCE] == "2"
        labels = node.metadata.labels
        assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.compute.major"]) == (
            model.product,
            str(model.compute_major),
        )


def test_a_pod_given_a_gpu_lists_the_gpu_of_its_node(
    kube: Kube, built_images: dict[str, images.BuiltImage]
) -> None:
    image = built_images["serving-cpu"].name
    pods = [_pod(f"smi-{name}", image, name, gpus=1) for name in NODES]
    finished = _run(kube, pods)
    for name, model in NODES.items():
        pod, log = finished[f"smi-{name}"]
        assert pod.spec.node_name == name and pod.status.phase == "Succeeded", log
        assert log == f"{model.name}, {model.compute_capability}\n"
    assert {log for _, log in finished.values()} == {
        "NVIDIA A100-SXM4-80GB, 8.0\n",
        "NVIDIA H100 80GB HBM3, 9.0\n",
    }
    assert GPU_MODELS["a100-80gb"] in NODES.values()


def test_a_pod_given_no_gpu_finds_no_devices(kube: Kube, built_images: dict[str, images.BuiltImage]) -> None:
    name = next(iter(NODES))
    finished = _run(kube, [_pod("smi-none", built_images["serving-cpu"].name, name, gpus=0)])
    pod, log = finished["smi-none"]
    assert pod.status.phase == "Failed" and log == "No devices were found\n"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 6


def test_each_node_publishes_its_gpus_as_a_resource_slice_with_nvidias_attributes(kube: Kube) -> None:
    resource = k8s.ResourceV1Api(kube.core.api_client)
    for name, model in NODES.items():
        (found,) = [
            item
            for item in resource.list_resource_slice(field_selector=f"spec.nodeName={name}").items
            if item.spec.driver == fakegpu.DRA_DRIVER
        ]
        assert found.spec.pool.name == name and len(found.spec.devices) == 2
        attributes = found.spec.devices[0].attributes
        assert {key: value.string for key, value in attributes.items() if value.string is not None} == {
            "productName": model.name,
            "architecture": model.architecture,
            "brand": "Nvidia",
            "uuid": attributes["uuid"].string,
        }
        assert attributes["uuid"].string.startswith("GPU-")
        assert attributes["cudaComputeCapability"].version == f"{model.compute_capability}.0"
        assert attributes["driverVersion"].version == "550.127.5"
    assert resource.read_device_class(fakegpu.DRA_DRIVER).spec.selectors[0].cel.expression == (
        "device.driver == 'gpu.nvidia.com'"
    )


def _claim_template(name: str, compute_capability: str) -> dict[str, Any]:
    """A claim of one GPU of `compute_capability` (`<major>.<minor>.0`), as a user of DRA writes one."""
    attribute = f'device.attributes["{fakegpu.DRA_DRIVER}"].cudaComputeCapability'
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": fakegpu.DRA_DRIVER,
            "selectors": [{"cel": {"expression": f'{attribute} == semver("{compute_capability}")'}}],
        },
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def test_a_claim_for_a_compute_capability_gets_that_gpu_on_the_node_that_has_it(
    kube: Kube, built_images: dict[str, images.BuiltImage]
) -> None:
    resource = k8s.ResourceV1Api(kube.core.api_client)
    pods = []
    for name, model in NODES.items():
        template = f"cc-{model.compute_major}-{model.compute_minor}"
        resource.create_namespaced_resource_claim_template(
            NAMESPACE, _claim_template(template, f"{model.compute_capability}.0")
        )
        # No nodeSelector and no nvidia.com/gpu: the claim alone places the pod.
        pod = _pod(f"dra-{template}", built_images["serving-cpu"].name, name, gpus=0)
        del pod["spec"]["nodeSelector"]
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        pods.append(pod)
    finished = _run(kube, pods)
    for name, model in NODES.items():
        pod, log = finished[f"dra-cc-{model.compute_major}-{model.compute_minor}"]
        assert pod.spec.node_name == name and pod.status.phase == "Succeeded", (log, pod.status.message)
        assert log == f"{model.name}, {model.compute_capability}\n"


def test_a_killed_plugin_takes_the_gpus_away_and_a_revived_node_has_them_again(
    two_kinds: LocalCluster, kube: Kube, built_images: dict[str, images.BuiltImage]
) -> None:
    name = next(iter(NODES))
    state = two_kinds.load_state()
    assert state is not None
    assert processes.kill(state.processes[f"{name}/fake-gpu"])
    # The kubelet marks the plugin's devices unhealthy when its stream ends, and reports so in its next
    # node status (every 10 s): still in the capacity (for a grace period), no longer allocatable.
    kube.wait_for(f"no allocatable GPU on {name}", lambda: _allocatable_gpus(kube, name) == "0", timeout=60)
    assert kube.core.read_node(name).status.capacity[GPU_RESOURCE] == "2"

    two_kinds.lose_node(name)
    two_kinds.revive_node(name)
    assert _allocatable_gpus(kube, name) == "2"
    # One GPU: until a restarted kubelet has synced its pods, it holds the devices its checkpoint gave pods
    # gone since (here the first test's), as it does on any node.
    finished = _run(kube, [_pod("smi-revived", built_images["serving-cpu"].name, name, gpus=1)])
    pod, log = finished["smi-revived"]
    assert pod.status.phase == "Succeeded" and log == "NVIDIA A100-SXM4-80GB, 8.0\n", pod.status.message
