"""The fake GPUs' pure parts: a pool's GPU model per node and its labels, the state file keeping them, the
device plugin's command line, and the nvidia-smi double over what the plugin puts in a container's
environment. The plugin itself, on real nodes: tests/pods/test_fake_gpus.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mmd_testbed.build_tools import nvidia_smi
from mmd_testbed.localcluster import fakegpu
from mmd_testbed.localcluster.network import ClusterNetwork
from mmd_testbed.localcluster.nodes import RealNode
from mmd_testbed.localcluster.objects import GPU_MODELS, NodePool, gpu_labels, gpu_node
from mmd_testbed.localcluster.state import ClusterState

A100, H100 = GPU_MODELS["a100-80gb"], GPU_MODELS["h100-80gb"]
TWO_KINDS = NodePool(count=2, gpus_per_node=2, gpu_models=("a100-80gb", "h100-80gb"), name_prefix="real-node")


def test_the_product_label_is_nvidia_smis_name_as_gpu_feature_discovery_writes_it() -> None:
    assert (A100.name, A100.product, A100.compute_capability) == (
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA-A100-SXM4-80GB",
        "8.0",
    )
    assert (H100.name, H100.product, H100.compute_capability) == (
        "NVIDIA H100 80GB HBM3",
        "NVIDIA-H100-80GB-HBM3",
        "9.0",
    )
    assert (A100.architecture, H100.architecture, GPU_MODELS["l40s"].architecture) == (
        "Ampere",
        "Hopper",
        "Ada Lovelace",
    )


def test_every_node_of_a_pool_has_its_model_unless_told_otherwise() -> None:
    pool = NodePool(count=3)
    assert [pool.model_of(ordinal) for ordinal in range(3)] == [A100] * 3
    assert {gpu_labels(pool, ordinal)["nvidia.com/gpu.product"] for ordinal in range(3)} == {A100.product}


def test_a_pool_can_give_each_node_its_own_model_and_the_labels_follow() -> None:
    first, second = gpu_labels(TWO_KINDS, 0), gpu_labels(TWO_KINDS, 1)
    assert {key: first[key] for key in first if key.startswith("nvidia.com/gpu.")} == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.machine": "kwok-fake-gpu-server",
    }
    assert (second["nvidia.com/gpu.product"], second["nvidia.com/gpu.family"]) == (H100.product, "hopper")
    assert (second["nvidia.com/gpu.compute.major"], second["nvidia.com/gpu.compute.minor"]) == ("9", "0")
    assert first["node.kubernetes.io/instance-type"] == "fake-2xa100-80gb"
    assert second["node.kubernetes.io/instance-type"] == "fake-2xh100-80gb"
    # kwok's nodes of such a pool too.
    assert (
        gpu_node("real-node-1", TWO_KINDS, 1)["metadata"]["labels"]["nvidia.com/gpu.product"] == H100.product
    )


def test_per_node_models_name_one_known_model_per_node() -> None:
    with pytest.raises(ValueError, match=r"names 1 model\(s\) for 2 node\(s\): one per node"):
        NodePool(count=2, gpu_models=("h100-80gb",))
    with pytest.raises(ValueError, match=r"unknown GPU model\(s\) b200; known: a100-80gb, h100-80gb, l40s"):
        NodePool(count=1, gpu_models=("b200",))


def test_per_node_models_survive_the_state_file() -> None:
    state = ClusterState(ports={}, real_pool=TWO_KINDS)
    again = ClusterState.from_json(json.loads(json.dumps(state.to_json())))
    # Equal, or a running cluster would be restarted as one with other nodes.
    assert again.real_pool == TWO_KINDS and again.real_pool.gpu_models == ("a100-80gb", "h100-80gb")


def test_the_plugin_of_a_node_advertises_its_model_in_the_kubelets_registry(tmp_path: Path) -> None:
    node = RealNode("real-node-1", 1, tmp_path, ClusterNetwork(7))
    argv = fakegpu.plugin_command(node, Path("/cache/fake-gpu"), TWO_KINDS.model_of(1), 2)
    assert argv[:3] == ["nsenter", f"--net={ClusterNetwork(7).netns_path('real-node-1')}", "--"]
    assert argv[3:] == [
        "/cache/fake-gpu",
        f"--registry-dir={tmp_path}/nodes/real-node-1/kubelet/root/plugins_registry",
        "--node=real-node-1",
        f"--id-seed={tmp_path}/nodes/real-node-1",
        "--gpus=2",
        "--product-name=NVIDIA H100 80GB HBM3",
        "--compute-capability=9.0",
        f"--health-address={node.address}:10290",
    ]


def _nvidia_smi(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The double run as the images run it: a program on its own, under whatever python3 there is."""
    return subprocess.run(
        [sys.executable, str(Path(nvidia_smi.__file__)), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_nvidia_smi_lists_the_gpus_the_plugin_gave_the_container() -> None:
    env = {
        "FAKE_NVIDIA_GPUS": fakegpu.fake_gpus_value(H100, 2),
        "NVIDIA_VISIBLE_DEVICES": "GPU-aaaa,GPU-bbbb",
    }
    assert env["FAKE_NVIDIA_GPUS"] == "NVIDIA H100 80GB HBM3,9.0;NVIDIA H100 80GB HBM3,9.0"
    listed = _nvidia_smi("--query-gpu=name,compute_cap", "--format=csv,noheader", env=env)
    assert (listed.returncode, listed.stdout) == (0, "NVIDIA H100 80GB HBM3, 9.0\n" * 2)
    header = _nvidia_smi("--query-gpu=index,uuid,count", "--format=csv", env=env)
    assert header.stdout.splitlines() == ["index, uuid, count", "0, GPU-aaaa, 2", "1, GPU-bbbb, 2"]
    listing = _nvidia_smi("-L", env=env)
    assert listing.stdout.splitlines()[1] == "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)"


def test_nvidia_smi_without_gpus_finds_no_devices_as_the_real_one() -> None:
    nothing = _nvidia_smi("--query-gpu=name,compute_cap", "--format=csv,noheader", env={})
    assert (nothing.returncode, nothing.stdout) == (6, "No devices were found\n")


def test_nvidia_smi_refuses_what_the_real_one_refuses() -> None:
    env = {"FAKE_NVIDIA_GPUS": fakegpu.fake_gpus_value(A100, 1)}
    field = _nvidia_smi("--query-gpu=name,clocks.bogus", "--format=csv", env=env)
    assert (field.returncode, field.stdout) == (2, 'Field "clocks.bogus" is not a valid field to query.\n')
    assert _nvidia_smi("--query-gpu=name", "--format=json", env=env).returncode == 2
