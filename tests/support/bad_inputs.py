"""A catalogue of malformed MultimodalDeployments, each with how it must fail and the change that fixes it.

Beyond `invalid_specs.CASES` (which the unit tier checks offline and the cluster tier by dry-run): these
cases are sent to a real API server with the real operator running (tests/cluster/test_bad_inputs.py)
and, where the check is offline, checked by `plan_resource` too (tests/unit/api/test_bad_inputs.py).

Every case is one of:

- REFUSED: the API server refuses the create (schema, CEL rule or name rule); the message names the field
  and, where the rule compares values, the values.
- INVALID: admitted, then reported phase Failed, Ready reason InvalidSpec, naming the field (what the CRD
  cannot say: derived limits, pod metadata the API server would refuse on a Job or Deployment).
- MISSING: admitted, then reported Failed with the reason of the missing reference (SourceClaimNotFound);
  the build waits for it. (A missing token Secret or key is the kubelet's to say, of the Job's pod, which
  kwok does not play: tests/cluster/test_secrets.py.)
- UNSCHEDULABLE: admitted and planned, but no node can hold its pods: the scheduler's reason
  (InsufficientGPUs) is reported. Its build Job exists (pending); it is the one case with children.
- YAML: YAML text with wrong types, sent with `kubectl apply --server-side`: refused, naming the field.
- UPDATE: a valid resource, then an update that changes an immutable choice: the update is refused.

`fixed` is the document after the fix (for UPDATE: the original, which must keep converging), and
`prerequisites` are objects the fix creates first (a Secret, a claim). No fixed document may use the same
name as another case's.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml

from tests.support.invalid_specs import BASE_MODELS, DELETE

REFUSED = "refused"
INVALID = "invalid"
MISSING = "missing"
UNSCHEDULABLE = "unschedulable"
YAML = "yaml"
UPDATE = "update"
OUTCOMES = (REFUSED, INVALID, MISSING, UNSCHEDULABLE, YAML, UPDATE)

# Refused by the API server (at admission): the others are admitted and reported by the operator.
AT_ADMISSION = frozenset({REFUSED, YAML, UPDATE})

MODELS: dict[str, dict[str, Any]] = {
    **BASE_MODELS,
    "blip2": {"type": "blip2", "source": {"huggingface": {"repo": "Salesforce/blip2-opt-2.7b"}}},
    "llava_onevision": {
        "type": "llava_onevision",
        "source": {"huggingface": {"repo": "llava-hf/llava-onevision-qwen2-7b-ov-hf"}},
    },
}
# Every lora source of the bases names this claim; the cluster test creates it once for the namespace.
LORA_CLAIM = "adapters"
# The taint of the small GPU node the tensor-parallel case is pinned to (only that case tolerates it).
SMALL_NODE_TAINT = "bad-input.mmd.dev/small"
_SMALL_NODE = {
    "nodeSelector": {"nvidia.com/gpu.count": "2"},
    "tolerations": [{"key": SMALL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
}
# Schema refusals: the API server's words and the offline validator's differ; these name the same rule.
SERVER_TYPE = "must be of type"


@dataclass(frozen=True)
class BadInput:
    """One malformed input, how it fails, and its fix."""

    id: str
    document: dict[str, Any]
    outcome: str
    path: str
    # In the offline problem at `path` (and in the API server's or operator's message unless `server`).
    fragment: str
    # The API server's (or kubectl's) wording, when it differs from the offline one.
    server: str | None = None
    # Ready's reason for the admitted outcomes.
    reason: str | None = None
    fix: dict[str, Any] = field(default_factory=dict)
    prerequisites: tuple[dict[str, Any], ...] = ()
    # Objects that exist before the bad input is sent (a Secret without the key it names).
    given: tuple[dict[str, Any], ...] = ()
    yaml_text: str | None = None
    update: dict[str, Any] | None = None
    # Where the rule compares values: each is shown, as written here, in the offline problem at `path` and
    # in the API server's or operator's message (strings quoted where the API server quotes them).
    values: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return str(self.document["metadata"]["name"])

    @property
    def fixed(self) -> dict[str, Any]:
        fixed = copy.deepcopy(self.document)
        _merge(fixed, self.fix)
        return fixed

    @property
    def updated(self) -> dict[str, Any]:
        """UPDATE only: the refused update of the (valid) document."""
        assert self.update is not None
        updated = copy.deepcopy(self.document)
        _merge(updated, self.update)
        return updated

    @property
    def server_fragment(self) -> str:
        return self.server if self.server is not None else self.fragment

    @property
    def offline(self) -> bool:
        """Whether `plan_resource` alone refuses the document (missing objects and nodes need a cluster)."""
        return self.outcome in {REFUSED, INVALID, YAML}


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """Merge `patch` into `target`; `DELETE` removes a key, also inside a section `target` lacks."""
    for key, value in patch.items():
        if value is DELETE:
            target.pop(key, None)
        elif isinstance(value, dict):
            if not isinstance(target.get(key), dict):
                target[key] = {}
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def document(name: str, model: str, patch: dict[str, Any] | None = None) -> dict[str, Any]:
    """A MultimodalDeployment `name` of base `model`, with `patch` merged in (`DELETE` removes a key)."""
    body: dict[str, Any] = {
        "apiVersion": "serving.multimodal.dev/v1alpha1",
        "kind": "MultimodalDeployment",
        "metadata": {"name": name},
        "spec": {"model": copy.deepcopy(MODELS[model])},
    }
    _merge(body, patch or {})
    return body


def serve_document(
    name: str, model_type: str, repo: str, patch: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A trtllm-serve MultimodalDeployment of `repo` at main (kwok's download stage reports its success)."""
    body: dict[str, Any] = {
        "apiVersion": "serving.multimodal.dev/v1alpha1",
        "kind": "MultimodalDeployment",
        "metadata": {"name": name},
        "spec": {
            "runtime": "trtllm-serve",
            "model": {"type": model_type, "source": {"huggingface": {"repo": repo}}},
        },
    }
    _merge(body, patch or {})
    return body


_QWEN = ("qwen2_5_vl", "Qwen/Qwen2.5-VL-7B-Instruct")
_GEMMA = ("gemma3", "google/gemma-3-4b-it")


def _spec(**sections: Any) -> dict[str, Any]:
    return {"spec": sections}


def secret(name: str, key: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {key: "hf_not_a_real_token"},
    }


def claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "100Gi"}}},
    }


def _refused(
    id: str,
    model: str,
    patch: dict[str, Any],
    path: str,
    fragment: str,
    fix: dict[str, Any],
    server: str | None = None,
    prerequisites: tuple[dict[str, Any], ...] = (),
    values: tuple[str, ...] = (),
) -> BadInput:
    return BadInput(
        id,
        document(id, model, patch),
        REFUSED,
        path,
        fragment,
        server,
        fix=fix,
        prerequisites=prerequisites,
        values=values,
    )


def _invalid(
    id: str,
    model: str,
    patch: dict[str, Any],
    path: str,
    fragment: str,
    fix: dict[str, Any],
    values: tuple[str, ...] = (),
) -> BadInput:
    return BadInput(
        id, document(id, model, patch), INVALID, path, fragment, reason="InvalidSpec", fix=fix, values=values
    )


def _yaml(id: str, text: str, path: str, fragment: str, server: str, fix: dict[str, Any]) -> BadInput:
    parsed = yaml.safe_load(text)
    return BadInput(id, parsed, YAML, path, fragment, server=server, fix=fix, yaml_text=text)


_HEADER = """apiVersion: serving.multimodal.dev/v1alpha1
kind: MultimodalDeployment
metadata:
  name: {name}
spec:
  model:
    type: llava
    source:
      huggingface:
        repo: llava-hf/llava-1.5-7b-hf
"""

_LONG_NAME = "llava-1-5-7b-hf-tp1-fp16-batch8-input2048-seq2560x"  # 50 characters
_BIG_ANNOTATIONS = {f"example.com/note-{i}": "x" * 60_000 for i in range(5)}  # 300 kB > 256 KiB

CASES: list[BadInput] = [
    # -- wrong types (the structural schema) --
    _refused(
        "type-tp-string",
        "llava",
        _spec(engine={"tensorParallelSize": "2"}),
        "spec.engine.tensorParallelSize",
        "must be 1, 2, 4, 8, 16 or 32",
        _spec(engine={"tensorParallelSize": 2}),
        server="Unsupported value",
        values=('"2"',),
    ),
    _refused(
        "type-images-bool",
        "vila",
        _spec(engine={"maxImagesPerRequest": True}),
        "spec.engine.maxImagesPerRequest",
        "valid integer",
        _spec(engine={"maxImagesPerRequest": 2}),
        server=SERVER_TYPE,
    ),
    _refused(
        "type-repo-number",
        "llava",
        _spec(model={"source": {"huggingface": {"repo": 1234}}}),
        "spec.model.source.huggingface.repo",
        "valid string",
        _spec(model={"source": {"huggingface": {"repo": "llava-hf/llava-1.5-7b-hf"}}}),
        server=SERVER_TYPE,
    ),
    _refused(
        "type-labels-list",
        "llava",
        _spec(serving={"pod": {"labels": ["team=vision"]}}),
        "spec.serving.pod.labels",
        "must be an object",
        _spec(serving={"pod": {"labels": {"team": "vision"}}}),
        server=SERVER_TYPE,
    ),
    _refused(
        "type-tolerations-object",
        "llava",
        _spec(serving={"pod": {"tolerations": {"key": "nvidia.com/gpu", "operator": "Exists"}}}),
        "spec.serving.pod.tolerations",
        "must be a valid array",
        _spec(serving={"pod": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}),
        server=SERVER_TYPE,
    ),
    _refused(
        "type-fraction-percent",
        "llava",
        _spec(serving={"kvCacheFreeGpuMemFraction": "90%"}),
        "spec.serving.kvCacheFreeGpuMemFraction",
        "valid number",
        _spec(serving={"kvCacheFreeGpuMemFraction": 0.9}),
        server=SERVER_TYPE,
    ),
    _refused(
        "type-shm-words",
        "llava",
        _spec(serving={"sharedMemorySize": "two gigabytes"}),
        "spec.serving.sharedMemorySize",
        '"two gigabytes" is not a Kubernetes quantity; write a number with an optional suffix such as 500Gi',
        _spec(serving={"sharedMemorySize": "2Gi"}),
        values=('"two gigabytes"',),
    ),
    _refused(
        "type-cache-size-words",
        "llava",
        _spec(engineCache={"size": "big"}),
        "spec.engineCache.size",
        '"big" is not a Kubernetes quantity; write a number with an optional suffix such as 500Gi',
        _spec(engineCache={"size": "200Gi"}),
        values=('"big"',),
    ),
    _refused(
        "type-retention-lowercase",
        "llava",
        _spec(engineCache={"retention": "delete"}),
        "spec.engineCache.retention",
        "must be 'Retain' or 'Delete'",
        _spec(engineCache={"retention": "Retain"}),
        server="Unsupported value",
        values=('"delete"',),
    ),
    # -- out of range --
    _refused(
        "range-batch-above-max",
        "llava",
        _spec(engine={"maxBatchSize": 4096}),
        "spec.engine.maxBatchSize",
        "less than or equal to 2048",
        _spec(engine={"maxBatchSize": 8}),
        values=("4096",),
    ),
    _refused(
        "range-input-len-zero",
        "llava",
        _spec(engine={"maxInputLen": 0}),
        "spec.engine.maxInputLen",
        "greater than or equal to 1",
        _spec(engine={"maxInputLen": 2048}),
        values=("0",),
    ),
    _refused(
        "range-seq-len-huge",
        "llava",
        _spec(engine={"maxSeqLen": 2_000_000}),
        "spec.engine.maxSeqLen",
        "less than or equal to 1048576",
        _spec(engine={"maxSeqLen": 4096}),
        values=("2000000",),
    ),
    _refused(
        "range-engine-beam-17",
        "llava",
        _spec(engine={"maxBeamWidth": 17}),
        "spec.engine.maxBeamWidth",
        "less than or equal to 16",
        _spec(engine={"maxBeamWidth": 4}),
        values=("17",),
    ),
    _refused(
        "range-images-65",
        "vila",
        _spec(engine={"maxImagesPerRequest": 65}),
        "spec.engine.maxImagesPerRequest",
        "less than or equal to 64",
        _spec(engine={"maxImagesPerRequest": 4}),
        values=("65",),
    ),
    _refused(
        "range-calibration-zero",
        "llava",
        _spec(engine={"kvCacheDtype": "fp8", "calibrationSize": 0}),
        "spec.engine.calibrationSize",
        "greater than or equal to 1",
        # The test bed's GPUs are A100s, whose compute capability (8.0) runs no FP8 KV cache: the fix is
        # converged with a 16-bit one.
        _spec(engine={"calibrationSize": 512, "kvCacheDtype": "auto"}),
        values=("0",),
    ),
    _refused(
        "range-replicas-1001",
        "llava",
        _spec(serving={"replicas": 1001}),
        "spec.serving.replicas",
        "less than or equal to 1000",
        _spec(serving={"replicas": 1}),
        values=("1001",),
    ),
    _refused(
        "range-triton-batch-zero",
        "llava",
        _spec(serving={"tritonMaxBatchSize": 0}),
        "spec.serving.tritonMaxBatchSize",
        "greater than or equal to 1",
        _spec(serving={"tritonMaxBatchSize": DELETE}),
        values=("0",),
    ),
    _refused(
        "range-queue-delay",
        "llava",
        _spec(serving={"queue": {"maxQueueDelayMicroseconds": 20_000_000}}),
        "spec.serving.queue.maxQueueDelayMicroseconds",
        "less than or equal to 10000000",
        _spec(serving={"queue": {"maxQueueDelayMicroseconds": 100}}),
        values=("20000000",),
    ),
    _refused(
        "range-preprocessing-zero",
        "llava",
        _spec(serving={"instances": {"preprocessing": 0}}),
        "spec.serving.instances.preprocessing",
        "greater than or equal to 1",
        _spec(serving={"instances": {"preprocessing": 2}}),
        values=("0",),
    ),
    _refused(
        "range-bls-instances",
        "llava",
        _spec(serving={"instances": {"bls": 300}}),
        "spec.serving.instances.bls",
        "less than or equal to 256",
        _spec(serving={"instances": {"bls": 8}}),
        values=("300",),
    ),
    _refused(
        "range-kv-fraction-above-one",
        "llava",
        _spec(serving={"kvCacheFreeGpuMemFraction": 1.5}),
        "spec.serving.kvCacheFreeGpuMemFraction",
        "less than or equal to 1",
        _spec(serving={"kvCacheFreeGpuMemFraction": 0.85}),
        values=("1.5",),
    ),
    _refused(
        "range-paged-kv-tokens-zero",
        "mllama",
        _spec(serving={"maxTokensInPagedKvCache": 0}),
        "spec.serving.maxTokensInPagedKvCache",
        "greater than or equal to 1",
        _spec(serving={"maxTokensInPagedKvCache": 16384}),
        values=("0",),
    ),
    _refused(
        "range-startup-budget",
        "llava",
        _spec(serving={"probes": {"startupTimeoutSeconds": 5}}),
        "spec.serving.probes.startupTimeoutSeconds",
        "greater than or equal to 10",
        _spec(serving={"probes": {"startupTimeoutSeconds": 900}}),
        values=("5",),
    ),
    _refused(
        "range-liveness-timeout",
        "llava",
        _spec(serving={"probes": {"livenessTimeoutSeconds": 1}}),
        "spec.serving.probes.livenessTimeoutSeconds",
        "greater than or equal to 2",
        _spec(serving={"probes": {"livenessTimeoutSeconds": 5}}),
        values=("1",),
    ),
    _refused(
        "range-backoff-limit",
        "llava",
        _spec(build={"backoffLimit": 21}),
        "spec.build.backoffLimit",
        "less than or equal to 20",
        _spec(build={"backoffLimit": 2}),
        values=("21",),
    ),
    _refused(
        "range-build-deadline",
        "llava",
        _spec(build={"activeDeadlineSeconds": 30}),
        "spec.build.activeDeadlineSeconds",
        "greater than or equal to 60",
        _spec(build={"activeDeadlineSeconds": 3600}),
        values=("30",),
    ),
    _refused(
        "range-hidden-size",
        "llava",
        _spec(model={"hiddenSize": 32}),
        "spec.model.hiddenSize",
        "greater than or equal to 64",
        _spec(model={"hiddenSize": 4096}),
        values=("32",),
    ),
    _refused(
        "range-lora-rank",
        "internlm_xcomposer2",
        _spec(model={"lora": {"maxRank": 2048}}),
        "spec.model.lora.maxRank",
        "less than or equal to 1024",
        _spec(model={"lora": {"maxRank": 64}}),
        values=("2048",),
    ),
    _refused(
        "range-onevision-patches",
        "llava_onevision",
        _spec(engine={"vision": {"maxPatchesPerRequest": 300}}),
        "spec.engine.vision.maxPatchesPerRequest",
        "less than or equal to 256",
        _spec(engine={"vision": {"maxPatchesPerRequest": 16}}),
        values=("300",),
    ),
    _refused(
        "range-pool-negative",
        "llava",
        _spec(serving={"cudaMemoryPoolBytes": -1}),
        "spec.serving.cudaMemoryPoolBytes",
        "greater than or equal to 0",
        _spec(serving={"cudaMemoryPoolBytes": DELETE}),
        values=("-1",),
    ),
    _refused(
        "range-lora-gpu-fraction",
        "internlm_xcomposer2",
        _spec(serving={"loraCache": {"gpuMemoryFraction": 0}}),
        "spec.serving.loraCache.gpuMemoryFraction",
        "greater than 0",
        _spec(serving={"loraCache": {"gpuMemoryFraction": 0.05}}),
        values=("0",),
    ),
    # -- contradictory limits --
    _refused(
        "contra-lora-adapter-sizes",
        "internlm_xcomposer2",
        _spec(serving={"loraCache": {"optimalAdapterSize": 512, "maxAdapterSize": 64}}),
        "spec.serving.loraCache.optimalAdapterSize",
        "optimalAdapterSize (512) must not exceed maxAdapterSize (64)",
        _spec(serving={"loraCache": {"optimalAdapterSize": 64, "maxAdapterSize": 512}}),
        values=("512", "64"),
    ),
    _refused(
        "contra-mllama-seq-not-above-input",
        "mllama",
        _spec(engine={"maxInputLen": 4096, "maxSeqLen": 1024}),
        "spec.engine.maxSeqLen",
        "maxSeqLen (1024) must be greater than maxInputLen (4096)",
        _spec(engine={"maxSeqLen": 5120}),
        values=("1024", "4096"),
    ),
    _invalid(
        "contra-input-shorter-than-image",
        "llava",
        _spec(engine={"maxInputLen": 512, "maxSeqLen": 1024}),
        "spec.engine.maxInputLen",
        "is 512 but one request carries 576 x 1 = 576 visual tokens",
        _spec(engine={"maxInputLen": 1024, "maxSeqLen": 1536}),
        values=("512", "576"),
    ),
    _invalid(
        "contra-onevision-vision-batch",
        "llava_onevision",
        _spec(engine={"vision": {"maxPatchesPerRequest": 4, "maxBatchSize": 8}}),
        "spec.engine.vision.maxBatchSize",
        "is 8 but must equal maxBatchSize x maxPatchesPerRequest = 1 x 4 = 4",
        _spec(engine={"vision": {"maxBatchSize": DELETE}}),
        values=("8", "4"),
    ),
    _invalid(
        "contra-vila-multimodal-len",
        "vila",
        _spec(engine={"maxImagesPerRequest": 2, "maxMultimodalLen": 1568}),
        "spec.engine.maxMultimodalLen",
        "is 1568 but must equal maxBatchSize x features per image x maxImagesPerRequest",
        _spec(engine={"maxMultimodalLen": DELETE}),
        values=("1568", "3136"),
    ),
    _invalid(
        "contra-mllama-triton-batch-above-default",
        "mllama",
        _spec(serving={"tritonMaxBatchSize": 512}),
        "spec.serving.tritonMaxBatchSize",
        "is 512 but must not exceed the engine's maxBatchSize",
        _spec(serving={"tritonMaxBatchSize": DELETE}),
        values=("512", "8"),
    ),
    # -- options the model type cannot take --
    _refused(
        "video-on-qwen2-vl",
        "qwen2_vl",
        _spec(engine={"vision": {"maxPatchesPerRequest": 16}}),
        "spec.engine.vision.maxPatchesPerRequest",
        "engine.vision.maxPatchesPerRequest (16) is supported only for model types llava_onevision; "
        "model.type is qwen2_vl",
        _spec(engine={"vision": DELETE}),
        values=("16", "qwen2_vl"),
    ),
    _refused(
        "video-on-vila",
        "vila",
        _spec(engine={"vision": {"maxPatchesPerRequest": 8}}),
        "spec.engine.vision.maxPatchesPerRequest",
        "engine.vision.maxPatchesPerRequest (8) is supported only for model types llava_onevision; "
        "model.type is vila",
        _spec(engine={"vision": DELETE}),
        values=("8", "vila"),
    ),
    _refused(
        "images-on-mllama",
        "mllama",
        _spec(engine={"maxImagesPerRequest": 4}),
        "spec.engine.maxImagesPerRequest",
        "maxImagesPerRequest above 1 (here 4) is supported only for model types vila; model.type is mllama",
        _spec(engine={"maxImagesPerRequest": 1}),
        values=("4", "mllama"),
    ),
    _invalid(
        "llava-beyond-its-context",
        "llava",
        _spec(engine={"maxBatchSize": 2048, "maxInputLen": 131072, "maxSeqLen": 262144}),
        "spec.engine.maxSeqLen",
        "is 262144, beyond the 4096 positions of llava-hf/llava-1.5-7b-hf (max_position_embeddings in its "
        "config.json)",
        _spec(engine={"maxBatchSize": DELETE, "maxInputLen": DELETE, "maxSeqLen": DELETE}),
        values=("262144", "4096"),
    ),
    _refused(
        "images-on-llava-1-5",
        "llava",
        _spec(engine={"maxImagesPerRequest": 8, "maxInputLen": 8192, "maxSeqLen": 9000}),
        "spec.engine.maxImagesPerRequest",
        "maxImagesPerRequest above 1 (here 8) is supported only for model types vila; model.type is llava",
        # LLaVA-1.5's positions end at 4096: the fix drops the longer lengths too.
        _spec(engine={"maxImagesPerRequest": 1, "maxInputLen": DELETE, "maxSeqLen": DELETE}),
        values=("8", "llava"),
    ),
    _refused(
        "kv-reuse-mllama",
        "mllama",
        _spec(serving={"kvCacheReuse": True}),
        "spec.serving.kvCacheReuse",
        "kvCacheReuse is supported only for model types blip2, llava, llava_onevision, vila; "
        "model.type is mllama",
        _spec(serving={"kvCacheReuse": False}),
        values=("mllama",),
    ),
    _refused(
        "kv-reuse-whisper",
        "whisper",
        _spec(serving={"kvCacheReuse": True}),
        "spec.serving.kvCacheReuse",
        "kvCacheReuse is supported only for model types",
        _spec(serving={"kvCacheReuse": DELETE}),
        values=("whisper",),
    ),
    _refused(
        "cross-fraction-vila",
        "vila",
        _spec(serving={"crossKvCacheFraction": 0.5}),
        "spec.serving.crossKvCacheFraction",
        "must not be set for decoder-only model types",
        _spec(serving={"crossKvCacheFraction": DELETE}),
        values=("vila",),
    ),
    _refused(
        "cross-fraction-qwen2-vl",
        "qwen2_vl",
        _spec(serving={"crossKvCacheFraction": 0.3}),
        "spec.serving.crossKvCacheFraction",
        "must not be set for decoder-only model types",
        _spec(serving={"crossKvCacheFraction": DELETE}),
        values=("qwen2_vl",),
    ),
    _refused(
        "fp8-on-whisper",
        "whisper",
        _spec(engine={"kvCacheDtype": "fp8"}),
        "spec.engine.kvCacheDtype",
        "kvCacheDtype fp8 is supported only for model types llava, llava_onevision, qwen2_vl, vila",
        _spec(engine={"kvCacheDtype": "auto"}),
        values=("whisper",),
    ),
    _refused(
        "chunked-context-distil-whisper",
        "distil_whisper",
        _spec(serving={"chunkedContext": True}),
        "spec.serving.chunkedContext",
        "chunkedContext is supported only for model types",
        _spec(serving={"chunkedContext": False}),
        values=("distil_whisper",),
    ),
    _refused(
        "zero-pad-on-mllama",
        "mllama",
        _spec(serving={"zeroPad": True}),
        "spec.serving.zeroPad",
        "zeroPad is supported only for model types distil_whisper, whisper; model.type is mllama",
        _spec(serving={"zeroPad": DELETE}),
        values=("mllama",),
    ),
    _refused(
        "encoder-len-on-vila",
        "vila",
        _spec(engine={"maxEncoderInputLen": 4096}),
        "spec.engine.maxEncoderInputLen",
        "maxEncoderInputLen (4096) is supported only for model types distil_whisper, mllama, whisper; "
        "model.type is vila",
        _spec(engine={"maxEncoderInputLen": DELETE}),
        values=("4096", "vila"),
    ),
    _refused(
        "vision-batch-on-whisper",
        "whisper",
        _spec(engine={"vision": {"maxBatchSize": 8}}),
        "spec.engine.vision.maxBatchSize",
        "engine.vision.maxBatchSize (8) is supported only for model types",
        _spec(engine={"vision": DELETE}),
        values=("8", "whisper"),
    ),
    _refused(
        "multimodal-len-on-whisper",
        "whisper",
        _spec(engine={"maxMultimodalLen": 1500}),
        "spec.engine.maxMultimodalLen",
        "maxMultimodalLen (1500) is supported only for model types",
        _spec(engine={"maxMultimodalLen": DELETE}),
        values=("1500", "whisper"),
    ),
    _refused(
        "lora-on-whisper",
        "whisper",
        _spec(model={"lora": {"source": {"pvc": {"claimName": LORA_CLAIM}}}}),
        "spec.model.lora",
        "model.lora is supported only for model types internlm_xcomposer2; model.type is whisper",
        _spec(model={"lora": DELETE}),
        values=("whisper",),
    ),
    # -- references to other objects: malformed (refused) or missing (reported) --
    _refused(
        "secret-name-malformed",
        "mllama",
        _spec(model={"source": {"huggingface": {"tokenSecretRef": {"name": "HF_Token", "key": "token"}}}}),
        "spec.model.source.huggingface.tokenSecretRef.name",
        "must match pattern",
        _spec(model={"source": {"huggingface": {"tokenSecretRef": {"name": "hf-token-malformed"}}}}),
        server="should match",
        prerequisites=(secret("hf-token-malformed", "token"),),
        values=('"HF_Token"',),
    ),
    _refused(
        "secret-key-malformed",
        "mllama",
        _spec(model={"source": {"huggingface": {"tokenSecretRef": {"name": "hf-key", "key": "hf token"}}}}),
        "spec.model.source.huggingface.tokenSecretRef.key",
        "must match pattern",
        _spec(model={"source": {"huggingface": {"tokenSecretRef": {"key": "token"}}}}),
        server="should match",
        prerequisites=(secret("hf-key", "token"),),
        values=('"hf token"',),
    ),
    _refused(
        "claim-name-malformed",
        "llava",
        _spec(model={"source": {"huggingface": DELETE, "pvc": {"claimName": "Models_PVC"}}}),
        "spec.model.source.pvc.claimName",
        "must match pattern",
        _spec(model={"source": {"pvc": {"claimName": "models-malformed"}}}),
        server="should match",
        prerequisites=(claim("models-malformed"),),
        values=('"Models_PVC"',),
    ),
    _refused(
        "service-account-malformed",
        "llava",
        _spec(serving={"pod": {"serviceAccountName": "Triton SA"}}),
        "spec.serving.pod.serviceAccountName",
        "must match pattern",
        _spec(serving={"pod": {"serviceAccountName": DELETE}}),
        server="should match",
        values=('"Triton SA"',),
    ),
    _refused(
        "pull-secret-malformed",
        "llava",
        _spec(build={"pod": {"imagePullSecrets": [{"name": "registry credentials"}]}}),
        "spec.build.pod.imagePullSecrets[0].name",
        "must match pattern",
        _spec(build={"pod": {"imagePullSecrets": DELETE}}),
        server="should match",
        values=('"registry credentials"',),
    ),
    _refused(
        "storage-class-malformed",
        "llava",
        _spec(engineCache={"storageClassName": "Fast_SSD"}),
        "spec.engineCache.storageClassName",
        "must match pattern",
        _spec(engineCache={"storageClassName": DELETE}),
        server="should match",
        values=('"Fast_SSD"',),
    ),
    _refused(
        "toleration-exists-with-value",
        "llava",
        _spec(serving={"pod": {"tolerations": [{"key": "gpu", "operator": "Exists", "value": "a100"}]}}),
        "spec.serving.pod.tolerations[0].value",
        "value (a100) must be empty when operator is Exists",
        _spec(serving={"pod": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}),
        values=("a100",),
    ),
    _refused(
        "toleration-empty-key-equal",
        "llava",
        _spec(build={"pod": {"tolerations": [{"operator": "Equal", "value": "a100"}]}}),
        "spec.build.pod.tolerations[0].operator",
        "operator (Equal) must be Exists when key is empty",
        _spec(build={"pod": {"tolerations": [{"key": "gpu", "operator": "Equal", "value": "a100"}]}}),
        values=("Equal",),
    ),
    BadInput(
        "source-claim-missing",
        document(
            "source-claim-missing",
            "llava",
            _spec(model={"source": {"huggingface": DELETE, "pvc": {"claimName": "llava-weights"}}}),
        ),
        MISSING,
        "spec.model.source.pvc.claimName",
        "PersistentVolumeClaim llava-weights not found in namespace",
        reason="SourceClaimNotFound",
        prerequisites=(claim("llava-weights"),),
        values=("llava-weights",),
    ),
    BadInput(
        "lora-claim-missing",
        document(
            "lora-claim-missing",
            "internlm_xcomposer2",
            _spec(model={"lora": {"source": {"pvc": {"claimName": "lora-absent"}}}}),
        ),
        MISSING,
        "spec.model.lora.source.pvc.claimName",
        "PersistentVolumeClaim lora-absent not found in namespace",
        reason="SourceClaimNotFound",
        fix=_spec(model={"lora": {"source": {"pvc": {"claimName": LORA_CLAIM}}}}),
        values=("lora-absent",),
    ),
    # -- pod metadata the API server would refuse on the Job or Deployment (reported InvalidSpec) --
    _invalid(
        "label-value-too-long",
        "llava",
        _spec(
            serving={
                "pod": {
                    "labels": {
                        "team": "vision-language-models-serving-team-of-the-applied-research-organisation"
                    }
                }
            }
        ),
        "spec.serving.pod.labels[team]",
        "is not a label value (at most 63",
        _spec(serving={"pod": {"labels": {"team": "vlm-serving"}}}),
        values=("vision-language-models-serving-team-of-the-applied-research-organisation",),
    ),
    _invalid(
        "label-key-malformed",
        "llava",
        _spec(build={"pod": {"labels": {"cost center": "ml"}}}),
        "spec.build.pod.labels",
        "key 'cost center' is not a qualified name",
        _spec(build={"pod": {"labels": {"cost center": DELETE, "cost-center": "ml"}}}),
        values=("cost center",),
    ),
    _invalid(
        "node-selector-value-malformed",
        "llava",
        _spec(serving={"pod": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA A100-SXM4-80GB"}}}),
        "spec.serving.pod.nodeSelector[nvidia.com/gpu.product]",
        "'NVIDIA A100-SXM4-80GB' is not a label value",
        _spec(serving={"pod": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}}),
        values=("NVIDIA A100-SXM4-80GB",),
    ),
    _invalid(
        "annotation-key-malformed",
        "llava",
        _spec(build={"pod": {"annotations": {"owner email": "ml@example.com"}}}),
        "spec.build.pod.annotations",
        "key 'owner email' is not a qualified name",
        _spec(build={"pod": {"annotations": {"owner email": DELETE, "example.com/owner": "ml@example.com"}}}),
        values=("owner email",),
    ),
    _invalid(
        "annotations-over-limit",
        "llava",
        _spec(serving={"pod": {"annotations": _BIG_ANNOTATIONS}}),
        "spec.serving.pod.annotations",
        "Kubernetes allows at most 262144 bytes of annotations",
        _spec(serving={"pod": {"annotations": DELETE}}),
        values=("300090", "262144"),
    ),
    # -- names the derived objects cannot carry --
    BadInput(
        "name-too-long",
        document(_LONG_NAME, "llava"),
        REFUSED,
        "metadata.name",
        "of at most 48 characters",
        fix={"metadata": {"name": "name-too-long"}},
        values=("llava-1-5-7b-hf-tp1-fp16-batch8-input2048-seq2560x", "50 characters"),
    ),
    BadInput(
        "name-with-dot",
        document("llava.v1-5", "llava"),
        REFUSED,
        "metadata.name",
        "must be a DNS label",
        fix={"metadata": {"name": "name-with-dot"}},
        values=("llava.v1-5",),
    ),
    BadInput(
        "name-starts-with-digit",
        document("7b-llava", "llava"),
        REFUSED,
        "metadata.name",
        "must be a DNS label",
        fix={"metadata": {"name": "name-starts-with-digit"}},
        values=("7b-llava",),
    ),
    # -- tensor parallelism no node can hold --
    BadInput(
        "tp-no-node-holds",
        document(
            "tp-no-node-holds",
            "llava",
            _spec(
                engine={"tensorParallelSize": 4},
                build={"pod": _SMALL_NODE},
                serving={"pod": _SMALL_NODE},
            ),
        ),
        UNSCHEDULABLE,
        # Ready's one sentence names the field and the GPUs; EngineReady also quotes the scheduler.
        "spec.engine.tensorParallelSize",
        "4 = 4 nvidia.com/gpu for one build pod",
        reason="InsufficientGPUs",
        fix=_spec(engine={"tensorParallelSize": 2}),
    ),
    # -- malformed YAML types, with kubectl apply --server-side --
    _yaml(
        "yaml-batch-string",
        _HEADER.format(name="yaml-batch-string") + '  engine:\n    maxBatchSize: "eight"\n',
        "spec.engine.maxBatchSize",
        "valid integer",
        "spec.engine.maxBatchSize",
        _spec(engine={"maxBatchSize": 8}),
    ),
    _yaml(
        "yaml-engine-list",
        _HEADER.format(name="yaml-engine-list") + "  engine:\n  - maxBatchSize: 8\n  - maxInputLen: 2048\n",
        "spec.engine",
        "must be an object",
        "spec.engine",
        _spec(engine={"maxBatchSize": 8, "maxInputLen": 2048}),
    ),
    _yaml(
        "yaml-replicas-float",
        _HEADER.format(name="yaml-replicas-float") + "  serving:\n    replicas: 1.5\n",
        "spec.serving.replicas",
        "valid integer",
        "spec.serving.replicas",
        _spec(serving={"replicas": 1}),
    ),
    _yaml(
        "yaml-streaming-string",
        _HEADER.format(name="yaml-streaming-string") + '  serving:\n    streaming: "yes"\n',
        "spec.serving.streaming",
        "valid boolean",
        "spec.serving.streaming",
        _spec(serving={"streaming": True}),
    ),
    _yaml(
        "yaml-model-string",
        _HEADER.format(name="yaml-model-string").split("  model:")[0] + "  model: llava-hf/llava-1.5-7b-hf\n",
        "spec.model",
        "must be an object",
        "spec.model",
        {
            "spec": {
                "model": {"type": "llava", "source": {"huggingface": {"repo": "llava-hf/llava-1.5-7b-hf"}}}
            }
        },
    ),
    # -- an update that changes an immutable choice --
    BadInput(
        "update-model-type",
        document("update-model-type", "llava"),
        UPDATE,
        "spec.model.type",
        "model.type is immutable (llava, now vila)",
        update={
            "spec": {
                "model": {
                    "type": "vila",
                    "source": {"huggingface": {"repo": "Efficient-Large-Model/vila1.5-3b"}},
                }
            }
        },
        values=("llava", "vila"),
    ),
    BadInput(
        "update-whisper-to-distil",
        document("update-whisper-to-distil", "whisper"),
        UPDATE,
        "spec.model.type",
        "model.type is immutable (whisper, now distil_whisper)",
        update={"spec": {"model": {"type": "distil_whisper", "variant": "distil-large-v3"}}},
        values=("whisper", "distil_whisper"),
    ),
    # -- the trtllm-serve runtime --
    BadInput(
        "serve-type-without-runtime",
        serve_document("serve-type-without-runtime", *_GEMMA, _spec(runtime=DELETE)),
        REFUSED,
        "spec.model.type",
        "is served only by runtime trtllm-serve: there is no TensorRT engine recipe for it",
        fix=_spec(runtime="trtllm-serve"),
        values=("gemma3",),
    ),
    BadInput(
        "serve-engine-only-type",
        serve_document("serve-engine-only-type", "mllama", "meta-llama/Llama-3.2-11B-Vision"),
        REFUSED,
        "spec.model.type",
        "is not served by runtime trtllm-serve: TensorRT-LLM 1.2.1's PyTorch backend lists no multimodal",
        fix=_spec(runtime=DELETE),
        values=("mllama",),
    ),
    BadInput(
        "serve-video-to-gemma3",
        serve_document("serve-video-to-gemma3", *_GEMMA, _spec(serving={"modalities": ["image", "video"]})),
        REFUSED,
        "spec.serving.modalities",
        "serving.modalities names video, which the model type does not take on its runtime",
        fix=_spec(serving={"modalities": ["image"]}),
        values=("gemma3", "trtllm-serve"),
    ),
    BadInput(
        "serve-tp-splits-no-heads",
        serve_document("serve-tp-splits-no-heads", *_QWEN, _spec(engine={"tensorParallelSize": 8})),
        REFUSED,
        "spec.engine.tensorParallelSize",
        "cannot split the checkpoint's heads among its ranks",
        fix=_spec(engine={"tensorParallelSize": 2}),
        values=("8", "Qwen/Qwen2.5-VL-7B-Instruct", "28 attention heads and 4 key-value heads"),
    ),
    BadInput(
        "serve-max-multimodal-len",
        serve_document("serve-max-multimodal-len", *_QWEN, _spec(engine={"maxMultimodalLen": 4096})),
        REFUSED,
        "spec.engine.maxMultimodalLen",
        "has no meaning on runtime trtllm-serve: it is a setting of the TensorRT engine build",
        fix=_spec(engine={"maxMultimodalLen": DELETE}),
        values=("4096",),
    ),
    BadInput(
        "serve-streaming",
        serve_document("serve-streaming", *_QWEN, _spec(serving={"streaming": True})),
        REFUSED,
        "spec.serving.streaming",
        "OpenAI clients ask for streaming per request",
        fix=_spec(serving={"streaming": False}),
        values=("true",),
    ),
    BadInput(
        "serve-kv-reuse-on-gemma3",
        serve_document("serve-kv-reuse-on-gemma3", *_GEMMA, _spec(serving={"kvCacheReuse": True})),
        REFUSED,
        "spec.serving.kvCacheReuse",
        "kvCacheReuse is supported on trtllm-serve only for model types",
        fix=_spec(serving={"kvCacheReuse": False}),
        values=("gemma3",),
    ),
    BadInput(
        "serve-label-value-too-long",
        serve_document(
            "serve-label-value-too-long", *_QWEN, _spec(serving={"pod": {"labels": {"team": "x" * 70}}})
        ),
        INVALID,
        "spec.serving.pod.labels[team]",
        "is not a label value (at most 63",
        reason="InvalidSpec",
        fix=_spec(serving={"pod": {"labels": {"team": "vlm"}}}),
        values=("x" * 70,),
    ),
    BadInput(
        "update-runtime",
        serve_document("update-runtime", "vila", "Efficient-Large-Model/NVILA-8B"),
        UPDATE,
        "spec.runtime",
        "runtime is immutable (trtllm-serve, now triton-trtllm-engine)",
        update={"spec": {"runtime": "triton-trtllm-engine"}},
        values=("trtllm-serve", "triton-trtllm-engine"),
    ),
]
