"""The local cluster's Hub double: the synthetic snapshots it serves, and its objects (built, not applied)."""

from __future__ import annotations

import base64
import importlib.util
import json
import struct
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from mmd_operator.desired import pods
from mmd_operator.knowledge import ModelType, checkpoint_shapes
from mmd_testbed.build_tools.hub import DELAY_PATH, Hub, HubServer
from mmd_testbed.localcluster import hub
from mmd_testbed.trtllm_serve.models import load_model

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples"


def test_it_serves_the_repository_of_every_trtllm_serve_example() -> None:
    served = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        spec = yaml.safe_load(path.read_text())["spec"]
        source = spec["model"]["source"].get("huggingface")
        if spec.get("runtime") == "trtllm-serve" and source is not None:
            served[source["repo"]] = ModelType(spec["model"]["type"])
    assert served == hub.REPOSITORIES


def test_a_synthetic_snapshot_is_what_the_trtllm_serve_double_loads(tmp_path: Path) -> None:
    for repo, model_type in hub.REPOSITORIES.items():
        directory = tmp_path / repo.split("/")[1]
        directory.mkdir()
        files = hub.synthetic_snapshot(repo, model_type)
        for name, content in files.items():
            (directory / name).write_bytes(content)
        model = load_model(str(directory))
        config = json.loads(files["config.json"])
        assert model.model_id == repo.split("/")[1] and model.architecture.name == config["architectures"][0]
        # The heads and layers where the knowledge has them (NVILA's it has not).
        shape = checkpoint_shapes().get(repo)
        keys = ("num_attention_heads", "num_key_value_heads", "num_hidden_layers")
        heads = [config.get(key) for key in keys]
        assert heads == ([shape.attention, shape.key_value, shape.layers] if shape else [None, None, None])
        assert "chat_template" in json.loads(files["tokenizer_config.json"])
        # Valid safetensors shards (its header's length, the header, then exactly the tensor's bytes),
        # each named in the index.
        index = json.loads(files["model.safetensors.index.json"])
        shards = sorted(name for name in files if name.endswith(".safetensors"))
        assert sorted(set(index["weight_map"].values())) == shards and len(shards) == 4
        for tensor, name in index["weight_map"].items():
            weights = files[name]
            (length,) = struct.unpack("<Q", weights[:8])
            header = json.loads(weights[8 : 8 + length])
            start, end = header[tensor]["data_offsets"]
            assert len(weights) == 8 + length + end - start and length % 8 == 0
        assert len({len(files[name]) for name in shards}) == 4  # unequal: a slow download ends them apart
        assert sum(map(len, files.values())) < 200_000


def test_its_objects_run_the_double_under_pod_security_restricted() -> None:
    objects = {(body["kind"], body["metadata"]["name"]): body for body in hub.manifests("builder:1")}
    namespace = objects[("Namespace", hub.NAMESPACE)]
    assert namespace["metadata"]["labels"] == {"pod-security.kubernetes.io/enforce": "restricted"}
    deployment = objects[("Deployment", hub.NAME)]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"] == pods.pod_security_context()
    (container,) = pod["containers"]
    assert container["securityContext"] == pods.container_security_context()
    assert container["image"] == "builder:1" and container["imagePullPolicy"] == "Never"
    # The program the CPU builder image installs with the test bed's wheel.
    assert container["command"][:3] == ["python3", "-m", "mmd_testbed.build_tools.hub"]
    assert importlib.util.find_spec("mmd_testbed.build_tools.hub") is not None
    repositories = [arg.split("=", 1) for arg in container["command"] if "=" in arg]
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    configmaps = {volume["name"]: volume["configMap"]["name"] for volume in pod["volumes"]}
    for repo, directory in repositories:
        data = objects[("ConfigMap", configmaps[mounts[directory]])]["binaryData"]
        files = {name: base64.b64decode(content) for name, content in data.items()}
        assert files == hub.synthetic_snapshot(repo, hub.REPOSITORIES[repo])
    assert sorted(repo for repo, _ in repositories) == sorted(hub.REPOSITORIES)
    service = objects[("Service", hub.NAME)]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert hub.ENDPOINT.startswith(f"http://{hub.NAME}.{hub.NAMESPACE}.svc.")
    assert service["spec"]["ports"][0]["port"] == 80


def test_a_test_can_slow_the_double_down_and_speed_it_up_again() -> None:
    state = Hub()
    with HubServer(state) as server:

        def put(body: bytes) -> int:
            request = urllib.request.Request(server.endpoint + DELAY_PATH, data=body, method="PUT")
            try:
                with urllib.request.urlopen(request, timeout=5) as reply:
                    return int(reply.status)
            except urllib.error.HTTPError as error:
                return error.code

        assert put(b"2.5") == 204 and state.chunk_delay == 2.5
        assert put(b"soon") == 400 and state.chunk_delay == 2.5
        assert put(b"0") == 204 and state.chunk_delay == 0.0
