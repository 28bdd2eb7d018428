"""The serving pod's last init container: refuse an engine built for another kind of GPU than the pod's.

TensorRT loads an engine only on the compute capability it was built for, and fails deep inside
tritonserver's start-up when it is not. The operator keeps pods on their engine's kind by placement, but
a node relabelled, a GPU swapped or a cache entry copied by hand escapes placement; this container looks
at the GPU the pod was actually given (`nvidia-smi`, as the NVIDIA container toolkit provides it) and at
the GPU the engine's manifest records, and stops the pod with both named before tritonserver starts.

It runs `PROGRAM` with the serving image's `python3` (NGC's tritonserver images have it; ours are not
installed there). What it cannot know it says and lets pass: a manifest with no GPU recorded, an image
without `nvidia-smi`, a GPU listing that fails. The same capability on another product passes with a
note (TensorRT warns, it does not refuse). Pure: builds a container manifest.
"""

from __future__ import annotations

from dataclasses import replace

from engine_builder.job_report import MANIFEST_NAME
from mmd_operator.desired import pods
from mmd_operator.desired.children import Manifest
from mmd_operator.plan.pod_resources import PodResources

GPU_CHECK_CONTAINER = "gpu-check"
GPU_QUERY = ("nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader")

PROGRAM = f"""\
import json, subprocess, sys

entry, key = sys.argv[1], sys.argv[2]
with open(entry + "/{MANIFEST_NAME}") as file:
    built = json.load(file).get("gpu") or {{}}
built_name, built_cc = built.get("name", "unknown"), built.get("compute_capability", "unknown")
if built_cc == "unknown":
    print(f"gpu check: engine {{key}} records no GPU; not compared")
    sys.exit(0)
try:
    listing = subprocess.run({list(GPU_QUERY)!r}, capture_output=True, text=True, timeout=60)
except (OSError, subprocess.SubprocessError) as error:
    print(f"gpu check: cannot list this pod's GPUs ({{error}}); engine {{key}} not compared")
    sys.exit(0)
said = (listing.stdout + listing.stderr).strip()
if listing.returncode != 0:
    print(f"gpu check: nvidia-smi exited {{listing.returncode}} ({{said}}); engine {{key}} not compared")
    sys.exit(0)
for index, line in enumerate(row for row in listing.stdout.splitlines() if row.strip()):
    name, _, cc = (part.strip() for part in line.rpartition(","))
    if cc != built_cc:
        sys.exit(
            f"engine {{key}} was built on {{built_name}} (compute capability {{built_cc}}) and this pod's "
            f"GPU {{index}} is {{name}} (compute capability {{cc}}): TensorRT loads an engine only on the "
            "compute capability it was built for. The engine's kind is in the resource's status "
            "(status.engine.gpu); keep this node's kind out of spec.serving.pod's placement, or label "
            "the node with the GPU it holds (nvidia.com/gpu.product, nvidia.com/gpu.compute.major/minor)"
        )
    if name != built_name:
        print(f"gpu check: GPU {{index}} is {{name}}, engine {{key}} was built on {{built_name}}: "
              f"same compute capability {{cc}}, TensorRT loads it with a warning")
print(f"gpu check: engine {{key}} was built for compute capability {{built_cc}}, as this pod's GPUs")
"""


def gpu_check_container(
    *, image: str, entry: str, cache_key: str, helper: PodResources, gpus: int, mounts: list[Manifest]
) -> Manifest:
    """The init container that compares the GPU recorded in `entry`'s manifest with the pod's `gpus`.

    It asks for the server's GPUs (an init container's requests do not add to the pod's: the pod asks
    for the larger of the two), so the device plugin hands it the same devices.
    """
    return {
        "name": GPU_CHECK_CONTAINER,
        "image": image,
        "command": ["python3", "-c", PROGRAM, entry, cache_key],
        "volumeMounts": mounts,
        "resources": replace(helper, gpus=gpus).manifest(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": pods.container_security_context(),
    }
