"""The local cluster's stand-in for the Hugging Face Hub: the Hub double in a pod, serving small snapshots.

Nothing here reaches the internet, yet the trtllm-serve runtime's download Jobs must download from
somewhere. So a real node runs the Hub double (`testbed/mmd_testbed/build_tools/hub.py`, which the CPU builder
image installs with the test bed's wheel) behind the Service `hub` in namespace `mmd-hub`, and the
operator is pointed at it with the chart value `hfEndpoint` (`ENDPOINT`): a download Job then runs the
real `python -m engine_builder download` (huggingface_hub's `model_info` and `snapshot_download`) in a real
pod against it, through CoreDNS and kube-proxy.

It serves the repositories of the trtllm-serve examples (`REPOSITORIES`), each a synthetic snapshot at one
commit that `main` names: a `config.json` naming the architecture (all the trtllm-serve double reads),
the checkpoint's heads and layers where the knowledge has them, a tokenizer config with a chat template, a
generation config and the weights in four shards of zeros with their index. About 170 kB each, so a
download takes well under a second (the double can be slowed down: `set_chunk_delay`); nothing in them is
a real model.

Imports the standard library, the kubernetes client, the knowledge table, the trtllm-serve double's
architectures, the pods' security settings, the double's own delay knob (`set_chunk_delay`), and `nodes`
and `realnodes` (the real nodes' label, `apply`).
"""

from __future__ import annotations

import base64
import json
import struct
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s

from mmd_operator.desired import pods
from mmd_operator.knowledge import ModelType, checkpoint_shapes, serve_knowledge_of
from mmd_testbed.build_tools.hub import DELAY_PATH
from mmd_testbed.localcluster.nodes import NODE_KIND_LABEL, REAL
from mmd_testbed.localcluster.realnodes import apply
from mmd_testbed.trtllm_serve.models import ARCHITECTURES

NAMESPACE = "mmd-hub"
NAME = "hub"
PORT = 8080
ENDPOINT = f"http://{NAME}.{NAMESPACE}.svc.cluster.local"
# The Hub double, from the test bed's wheel in the CPU builder image (Dockerfile, engine-builder-cpu).
PROGRAM = ("python3", "-m", "mmd_testbed.build_tools.hub")
SNAPSHOTS = "/snapshots"
# The repositories of the trtllm-serve examples (`spec.runtime: trtllm-serve` under examples/).
REPOSITORIES = {
    "Efficient-Large-Model/NVILA-8B": ModelType.VILA,
    "Qwen/Qwen2-VL-7B-Instruct": ModelType.QWEN2_VL,
    "Qwen/Qwen2.5-VL-3B-Instruct": ModelType.QWEN2_5_VL,
    "Qwen/Qwen2.5-VL-72B-Instruct": ModelType.QWEN2_5_VL,
    "Qwen/Qwen3-VL-8B-Instruct": ModelType.QWEN3_VL,
    "google/gemma-3-12b-it": ModelType.GEMMA3,
    "llava-hf/llava-v1.6-mistral-7b-hf": ModelType.LLAVA_NEXT,
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": ModelType.LLAMA4,
    "microsoft/Phi-4-multimodal-instruct": ModelType.PHI4MM,
    "mistralai/Mistral-Small-3.1-24B-Instruct-2503": ModelType.MISTRAL3,
}
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
_LABELS = {"app.kubernetes.io/name": "hub-double"}
# The weights, sharded as real checkpoints are: one bf16 tensor of zeros per shard, 256 wide, of these
# many rows (16, 32, 48 and 64 KiB), so that a slowed-down download finishes its shards one by one.
_SHARD_ROWS = (32, 64, 96, 128)
_COLUMNS = 256
_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% else %}<|vision_start|><|image_pad|><|vision_end|>{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _safetensors(tensor: str, rows: int) -> bytes:
    size = rows * _COLUMNS * 2
    header = json.dumps(
        {
            "__metadata__": {"format": "pt", "mmd": "synthetic: zeros, no model"},
            tensor: {"dtype": "BF16", "shape": [rows, _COLUMNS], "data_offsets": [0, size]},
        },
        separators=(",", ":"),
    ).encode()
    header += b" " * (-len(header) % 8)  # the format pads the header to 8 bytes
    return struct.pack("<Q", len(header)) + header + bytes(size)


def _shards() -> dict[str, bytes]:
    """The weight shards and their index (`model.safetensors.index.json`), as a sharded checkpoint has."""
    count = len(_SHARD_ROWS)
    shards = {
        f"model-{index:05d}-of-{count:05d}.safetensors": (f"layers.{index}.weight", rows)
        for index, rows in enumerate(_SHARD_ROWS, 1)
    }
    files = {name: _safetensors(tensor, rows) for name, (tensor, rows) in shards.items()}
    index = {
        "metadata": {"total_size": sum(rows * _COLUMNS * 2 for rows in _SHARD_ROWS)},
        "weight_map": {tensor: name for name, (tensor, _) in shards.items()},
    }
    return {**files, "model.safetensors.index.json": json.dumps(index, indent=2).encode() + b"\n"}


def synthetic_snapshot(repo: str, model_type: ModelType) -> dict[str, bytes]:
    """The files of a synthetic snapshot of `repo`: what the trtllm-serve double loads."""
    knowledge = serve_knowledge_of(model_type)
    config: dict[str, Any] = {
        "architectures": [knowledge.architecture],
        "model_type": ARCHITECTURES[knowledge.architecture].model_type,
        "torch_dtype": "bfloat16",
        "_name_or_path": repo,
        "mmd_synthetic": "a snapshot made by the local cluster's Hub double: no weights, no model",
    }
    shape = checkpoint_shapes().get(repo)
    if shape is not None:
        config |= {
            "num_attention_heads": shape.attention,
            "num_key_value_heads": shape.key_value,
            "num_hidden_layers": shape.layers,
        }
    documents = {
        "config.json": config,
        "generation_config.json": {"do_sample": False, "max_new_tokens": 64},
        "tokenizer_config.json": {"chat_template": _CHAT_TEMPLATE, "model_max_length": 32768},
    }
    files = {name: json.dumps(value, indent=2).encode() + b"\n" for name, value in documents.items()}
    return {**files, **_shards()}


def _volume(index: int) -> str:
    return f"snapshot-{index}"


def manifests(image: str) -> list[dict[str, Any]]:
    """The namespace, one ConfigMap per repository, the Deployment running the double, and its Service."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": RESTRICTED}}
    ]
    arguments = ["--host", "0.0.0.0", "--port", str(PORT)]
    volumes, mounts = [], []
    for index, (repo, model_type) in enumerate(sorted(REPOSITORIES.items())):
        files = synthetic_snapshot(repo, model_type)
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{NAME}-{_volume(index)}", "namespace": NAMESPACE, "labels": _LABELS},
                "binaryData": {name: base64.b64encode(content).decode() for name, content in files.items()},
            }
        )
        volumes.append({"name": _volume(index), "configMap": {"name": f"{NAME}-{_volume(index)}"}})
        mounts.append({"name": _volume(index), "mountPath": f"{SNAPSHOTS}/{index}", "readOnly": True})
        arguments += ["--repository", f"{repo}={SNAPSHOTS}/{index}"]
    container = {
        "name": NAME,
        "image": image,
        "imagePullPolicy": "Never",
        "command": [*PROGRAM, *arguments],
        "ports": [{"name": "http", "containerPort": PORT}],
        "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 1},
        "securityContext": pods.container_security_context(),
        "volumeMounts": mounts,
    }
    pod_spec = {
        "nodeSelector": {NODE_KIND_LABEL: REAL},
        "securityContext": pods.pod_security_context(),
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
        "volumes": volumes,
    }
    return [
        *objects,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": _LABELS},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": _LABELS},
                "template": {"metadata": {"labels": _LABELS}, "spec": pod_spec},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": _LABELS},
            "spec": {
                "selector": _LABELS,
                "ports": [{"name": "http", "port": 80, "targetPort": PORT, "protocol": "TCP"}],
            },
        },
    ]


def deploy(api_client: k8s.ApiClient, image: str, say: Callable[[str], None], timeout: float = 120) -> None:
    """Apply `manifests(image)` and wait until the double's pod of that image is ready."""
    started = time.monotonic()
    apply(api_client, manifests(image))
    apps = k8s.AppsV1Api(api_client)
    while True:
        deployment: Any = apps.read_namespaced_deployment(NAME, NAMESPACE)
        status = deployment.status
        # Rolled out: the pod of this image is ready and no older one is left.
        if (
            (status.observed_generation or 0) >= deployment.metadata.generation
            and status.updated_replicas == status.ready_replicas == status.replicas == 1
        ):
            break
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"the Hub double in {NAMESPACE} was not ready after {timeout:.0f} s")
        time.sleep(0.5)
    say(
        f"    the Hub double serves {len(REPOSITORIES)} synthetic snapshots at {ENDPOINT} "
        f"(ready after {time.monotonic() - started:.1f} s)"
    )


def set_chunk_delay(api_client: k8s.ApiClient, seconds: float) -> None:
    """Make the running double pause `seconds` after each 4 kB chunk it sends (0: none).

    Asked through its Service from this host: a download then lasts long enough to watch its progress.
    """
    service: Any = k8s.CoreV1Api(api_client).read_namespaced_service(NAME, NAMESPACE)
    url = f"http://{service.spec.cluster_ip}{DELAY_PATH}"
    request = urllib.request.Request(url, data=str(seconds).encode(), method="PUT")
    with urllib.request.urlopen(request, timeout=10) as answer:
        if answer.status != 204:
            raise RuntimeError(f"{url} answered {answer.status}")
