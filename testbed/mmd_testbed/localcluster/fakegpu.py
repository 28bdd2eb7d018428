"""The real nodes' fake GPUs: the device plugin double's build and command line, and what containers see.

On a GPU cluster NVIDIA's device plugin registers `nvidia.com/gpu` with each node's kubelet, and the NVIDIA
container toolkit gives a container the GPUs the kubelet allocated to it. Here `testbed/go/nodes/fake-gpu`
(Go, the kubelet's device plugin API v1beta1 at the cluster's Kubernetes version) does the first on each
real node, with `gpus_per_node` devices of the node's GPU model (`NodePool.model_of`), and stands in for
the second: a container given GPUs gets `NVIDIA_VISIBLE_DEVICES` (their IDs, `GPU-<uuid>`) and
`FAKE_NVIDIA_GPUS` (one `<name>,<major>.<minor>` per GPU, ';'-separated), which the images' `nvidia-smi`
double (`mmd_testbed.build_tools.nvidia_smi`) prints as the real one prints the GPUs it sees. No device,
driver or mount reaches a container: this machine has none.

The plugin is built once per digest of its sources and the Go toolchain into a cache of its own beside
the node components' (so changing it rebuilds nothing else), with the same `go` environment and
scratch-then-rename under a file lock as every other cache (`binaries.build_cache`). It runs as one more
node component (`fake-gpu`, logging to `<cluster dir>/logs/<node>.fake-gpu.log`), in the node's network
namespace, and finds the kubelet's registration socket in `<kubelet root>/device-plugins/`.

Imports: the standard library and `binaries`, `layout`, `nodes`, `objects`, `processes`.
"""

from __future__ import annotations

import hashlib
from functools import partial
from pathlib import Path

from mmd_testbed.localcluster.binaries import BinarySpec, Printer, build_cache
from mmd_testbed.localcluster.layout import Layout, Toolchain
from mmd_testbed.localcluster.nodes import RealNode
from mmd_testbed.localcluster.objects import GpuModel
from mmd_testbed.localcluster.processes import exclusive_lock

BINARY = "fake-gpu"
COMPONENT = "fake-gpu"
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
FAKE_GPUS_ENV = "FAKE_NVIDIA_GPUS"
# Bump when the build recipe changes in a way the digest of the sources cannot see.
_RECIPE_VERSION = "1"


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
            spec = BinarySpec(BINARY, BINARY, ".", (), ("-s", "-w"))
            build_cache(toolchain, root, [spec], lambda _wrapper: sources, {"sources": str(sources)}, say)
    return binary


def device_plugin_dir(node: RealNode) -> Path:
    """The kubelet's device-plugins directory: its `kubelet.sock`, and the plugins' sockets."""
    return node.kubelet_root / "device-plugins"


def plugin_command(node: RealNode, binary: Path, model: GpuModel, gpus: int) -> list[str]:
    """The plugin's argv for `node`, with `gpus` devices of `model`, in the node's network namespace."""
    return node.network.in_netns(
        node.name,
        [
            str(binary),
            f"--plugin-dir={device_plugin_dir(node)}",
            f"--node={node.name}",
            f"--gpus={gpus}",
            f"--product-name={model.name}",
            f"--compute-capability={model.compute_capability}",
        ],
    )


def fake_gpus_value(model: GpuModel, count: int) -> str:
    """`FAKE_NVIDIA_GPUS` of a container given `count` GPUs of `model` (the plugin writes the same)."""
    return ";".join([f"{model.name},{model.compute_capability}"] * count)
