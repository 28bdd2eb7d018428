"""The real nodes' fake GPUs: the device plugin double's build and command line, and what containers see.

On a GPU cluster NVIDIA's device plugin registers `nvidia.com/gpu` with each node's kubelet, and the NVIDIA
container toolkit gives a container the GPUs the kubelet allocated to it. Here `testbed/go/nodes/fake-gpu`
(Go, the kubelet's device plugin API v1beta1 at the cluster's Kubernetes version) does the first on each
real node, with `gpus_per_node` devices of the node's GPU model (`NodePool.model_of`), and stands in for
the second: a container given GPUs gets `NVIDIA_VISIBLE_DEVICES` (their IDs, `GPU-<uuid>`) and
`FAKE_NVIDIA_GPUS` (one `<name>,<major>.<minor>` per GPU, ';'-separated), which the images' `nvidia-smi`
double (`mmd_testbed.build_tools.nvidia_smi`) prints as the real one prints the GPUs it sees. No device,
driver or mount reaches a container: this machine has none.

The same process is also the DRA driver `gpu.nvidia.com` (`k8s.io/dynamic-resource-allocation`'s
kubeletplugin at the cluster's version, registered in the same plugin registry, with the node's own
credentials): it publishes the node's ResourceSlice, one device per GPU with the attributes of NVIDIA's
DRA driver (`productName`, `architecture`, `brand`, `cudaComputeCapability` and `driverVersion` as
versions, `uuid`, `index`; capacity `memory`), and prepares a claim by writing a CDI spec of the claim
into the node's `cdi_dir`, which its containerd reads, setting the same two variables. `device_class` is
its DeviceClass, which `realnodes` installs. The two halves advertise the same GPUs and do not know of
each other's allocations: a test uses one or the other on a node.

The plugin is built once per digest of its sources and the Go toolchain into a cache of its own beside the
node components' (so changing it rebuilds nothing else), with the same `go` environment and
scratch-then-rename under a file lock as every other cache (`binaries.build_cache`). It runs as one more
node component (`fake-gpu`, logging to `<cluster dir>/logs/<node>.fake-gpu.log`), in the node's network
namespace. It registers through the kubelet's plugin watcher, with a socket in the node's `<kubelet
root>/plugins_registry/`: the kubelet's own registration socket,
`/var/lib/kubelet/device-plugins/kubelet.sock`, is a constant whatever its `--root-dir`, one path for
every real node of every cluster on this machine (each kubelet deletes the others' socket when it starts).
That directory also holds the kubelet's device checkpoint, so a restarted kubelet may read another node's:
it only matters for pods that outlive a kubelet restart, and a lost node (`realnodes.NodeRunner.lose`)
loses its containers with its kubelet.

Imports: the standard library and `binaries`, `layout`, `nodes`, `objects`, `processes`.
"""

from __future__ import annotations

import hashlib
from functools import partial
from pathlib import Path
from typing import Any

from mmd_testbed.localcluster.binaries import BinarySpec, Printer, build_cache
from mmd_testbed.localcluster.layout import Layout, Toolchain
from mmd_testbed.localcluster.nodes import FAKE_GPU_HEALTH_PORT, RealNode
from mmd_testbed.localcluster.objects import GpuModel
from mmd_testbed.localcluster.processes import exclusive_lock

BINARY = "fake-gpu"
COMPONENT = "fake-gpu"
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
# The DRA driver's name, and its DeviceClass's.
DRA_DRIVER = "gpu.nvidia.com"
# The driver of GPU feature discovery's `nvidia.com/cuda.driver.major/minor` labels (`objects.gpu_labels`).
DRIVER_VERSION = "550.127.05"
FAKE_GPUS_ENV = "FAKE_NVIDIA_GPUS"
# Bump when the build recipe changes in a way the digest of the sources cannot see.
_RECIPE_VERSION = "3"  # 2: GO_BUILD_FLAGS; 3: the test binary


def source_dir(layout: Layout) -> Path:
    """Return `testbed/go/nodes/fake-gpu/`, the plugin's Go module."""
    return layout.node_tools_dir / BINARY


def _digest(sources: Path, toolchain: Toolchain) -> str:
    digest = hashlib.sha256(f"{_RECIPE_VERSION}\0{toolchain.version}\0".encode())
    for path in sorted(sources.iterdir()):
        if path.is_file():
            digest.update(f"{path.name}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def ensure_fake_gpu(layout: Layout, say: Printer = print) -> Path:
    """Return the built plugin's path, building it first when the cache has no build of these sources."""
    toolchain = Toolchain.discover()
    sources = source_dir(layout)
    root = layout.cache_root.parent / BINARY / f"{BINARY}-{toolchain.version}-{_digest(sources, toolchain)}"
    binary = root / "bin" / BINARY
    if binary.is_file():
        return binary
    lock = root.parent / ".build.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(lock, partial(say, f"==> another build holds {lock}; waiting for it")):
        if not binary.is_file():
            say(f"==> building the fake GPU device plugin ({sources.name}) with {toolchain.version}")
            record = {"sources": str(sources)}
            build_cache(toolchain, root, fake_gpu_specs(), lambda _wrapper: sources, record, say)
    return binary


def registry_dir(node: RealNode) -> Path:
    """The kubelet's plugin watcher directory, where the plugin's socket goes."""
    return node.kubelet_root / "plugins_registry"


def registration_socket(node: RealNode) -> Path:
    """The plugin's socket (the plugin's `--socket-name` default): the longest socket path of a node."""
    return registry_dir(node) / "gpu.sock"


def fake_gpu_specs() -> list[BinarySpec]:
    """The plugin's build recipe (its own module is its wrapper), and its Go tests' binary (`test_binary`)."""
    package = f"mmd-operator/testbed/go/nodes/{BINARY}"
    return [
        BinarySpec(BINARY, BINARY, package, (), ("-s", "-w")),
        BinarySpec(f"{BINARY}.test", BINARY, package, (), ("-s", "-w"), test=True),
    ]


def test_binary(plugin: Path) -> Path:
    """The plugin's Go tests (main_test.go) compiled beside `plugin` (`ensure_fake_gpu`'s result)."""
    return plugin.with_name(f"{BINARY}.test")


def plugin_command(node: RealNode, binary: Path, model: GpuModel, gpus: int, kubeconfig: Path) -> list[str]:
    """The plugin's argv for `node`, with `gpus` devices of `model`, in the node's network namespace.

    `kubeconfig` is the node's own (the kubelet's): its DRA half publishes the node's ResourceSlice and
    reads the claims of the node's pods, which the Node authorizer lets a node do for itself.
    """
    return node.network.in_netns(
        node.name,
        [
            str(binary),
            f"--registry-dir={registry_dir(node)}",
            f"--node={node.name}",
            # Unique per cluster: the kubelets of every cluster here share one device checkpoint.
            f"--id-seed={node.directory}",
            f"--gpus={gpus}",
            f"--product-name={model.name}",
            f"--compute-capability={model.compute_capability}",
            f"--health-address={node.address}:{FAKE_GPU_HEALTH_PORT}",
            f"--architecture={model.architecture}",
            f"--memory-mib={model.memory_mib}",
            f"--driver-version={DRIVER_VERSION}",
            f"--dra-kubeconfig={kubeconfig}",
            f"--dra-plugin-dir={node.directory / 'gpu'}",
            f"--cdi-dir={node.cdi_dir}",
        ],
    )


def device_class() -> dict[str, Any]:
    """The DeviceClass of the plugin's GPUs, as NVIDIA's DRA driver installs its own."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRA_DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRA_DRIVER}'"}}]},
    }


def fake_gpus_value(model: GpuModel, count: int) -> str:
    """`FAKE_NVIDIA_GPUS` of a container given `count` GPUs of `model` (the plugin writes the same)."""
    return ";".join([f"{model.name},{model.compute_capability}"] * count)
