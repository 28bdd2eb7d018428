"""The trtllm-serve runtime's plan: the weights to download, the `--config` YAML and the exact argv.

Nothing is built. A Hugging Face source becomes a `DownloadPlan` keyed by repository and revision
(`weights_format.weights_key`): the download Job's key, and the snapshot's when the revision is a commit;
a branch or tag is resolved by the Job and recorded in the claim's index, so where the snapshot lies is
known only then (`snapshot_path`). A `model.source.pvc` source is served where it lies, with no download.

The serving options become the LlmArgs YAML `trtllm-serve --config` applies (TensorRT-LLM 1.2.1's
TorchLlmArgs and KvCacheConfig field names, which tests check against the trtllm-serve double's facts):
`max_batch_size`, `max_num_tokens`, `max_seq_len`, `dtype`, `kv_cache_config` (`free_gpu_memory_fraction`,
`enable_block_reuse` always written, since the backend's default is on and most multimodal types cannot
reuse, `dtype: fp8`, `max_tokens`), `enable_chunked_prefill`, and `return_perf_metrics: true`, without
which `/prometheus/metrics` does not exist. In one pod trtllm-serve spawns its own ranks (see `launch`).
A world across pods runs every rank under `trtllm-llmapi-launch` from the `mpirun` of its group's leader
(`group_segments`): rank 0 serves, the others run the LLM API's MPI workers. TensorRT-LLM documents this
only for Slurm (`srun ... trtllm-llmapi-launch trtllm-serve`, docs/source/commands/trtllm-serve.rst,
"Multi-node Serving with Slurm"); Dynamo's operator launches it from `mpirun` over SSH the same way
(deploy/operator/internal/dynamo/backend_trtllm.go). Pure: imports the api models, the knowledge, the
pinned versions and the builder's weights format.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, ClassVar

import yaml

from engine_builder import versions
from engine_builder.weights_format import DownloadPlan, is_commit, snapshot_directory, weights_key
from mmd_operator.api.v1alpha1 import MultimodalDeploymentSpec, Parallelism
from mmd_operator.api.validation import InvalidSpecError
from mmd_operator.facts import GpuKind
from mmd_operator.knowledge import Modality, Runtime, ServeKnowledge, serve_knowledge_of
from mmd_operator.plan.fit import (
    DEFAULT_MAX_NUM_TOKENS,
    WEIGHT_BYTES,
    GpuNeeds,
    KnownShape,
    context_problems,
    estimate,
    requirements,
    shape_of,
)
from mmd_operator.plan.launch import HTTP_PORT, Segment
from mmd_operator.plan.pod_resources import (
    BYTES_16_BITS,
    Checkpoint,
    Figures,
    PlannedResources,
    Share,
    checkpoint_of,
    counted,
    effective,
    fixed,
    serving_pods,
    shared_memory_mib,
)
from mmd_operator.plan.settings import ENGINE_MOUNT

TRTLLM_SERVE = "trtllm-serve"
LLMAPI_LAUNCH = "trtllm-llmapi-launch"
# Where the serving pod finds the generated YAML (from its ConfigMap) and a PersistentVolumeClaim source.
CONFIG_MOUNT = "/etc/trtllm-serve"
CONFIG_FILE = "config.yaml"
SOURCE_MOUNT = "/model-source"
DEFAULT_FREE_GPU_MEMORY_FRACTION = 0.9
# What trtllm-serve uses where the spec says nothing (its click defaults at 1.2.1), shown by render.
SERVE_DEFAULTS = {"max_batch_size": 2048, "max_num_tokens": 8192}
# Host memory (MiB) of what runs in the download and serving pods: estimates of what each process loads
# (docs/resource.md#cpu-and-memory). trtllm-serve's own process: the OpenAI server, the tokenizer and the
# checkpoint's processor with the images it decodes; video adds its frames.
SERVER_PROCESS_MIB, VIDEO_FRAMES_MIB = 2048, 1024
# One rank of the PyTorch backend: torch, TensorRT-LLM, a CUDA context, pinned buffers.
SERVE_RANK_MIB = 4096
# The download: Python, huggingface_hub, files written in pieces of 10 MB (their page cache is charged to
# the pod but given back when it runs short).
DOWNLOAD_CPU, DOWNLOAD_MIB = 1000, 2048
# CPU (millicores): trtllm-serve's process tokenizes and decodes media; each rank's loop keeps a core busy.
SERVER_PROCESS_CPU, SERVE_RANK_CPU = 1000, 1000
DOWNLOAD_CONTAINER = "weights-download"
SERVER_CONTAINER = "trtllm-serve"


@dataclass(frozen=True)
class TrtllmServePlan:
    """Everything the operator derives from a trtllm-serve spec."""

    runtime: ClassVar[Runtime] = Runtime.TRTLLM_SERVE

    spec: MultimodalDeploymentSpec
    knowledge: ServeKnowledge
    # The download's key (Hugging Face source) or a digest of the claim and path (PersistentVolumeClaim).
    cache_key: str
    download: DownloadPlan | None
    config: dict[str, Any]
    serving_image: str
    # The world of one replica (`--tp_size` x `--pp_size`) and its shape.
    parallelism: Parallelism
    modalities: tuple[Modality, ...]
    resources: PlannedResources
    # What each GPU must offer: capabilities, and memory where the checkpoint's shape is known (`fit`).
    gpu_needs: GpuNeeds

    @property
    def gpu_kind(self) -> GpuKind | None:
        """None: the snapshot serves on any kind of GPU."""
        return None

    @property
    def config_yaml(self) -> str:
        """The `--config` file."""
        return yaml.safe_dump(self.config, sort_keys=True)

    def snapshot_path(self, snapshot_key: str | None) -> str:
        """Where the serving pod finds the model: the snapshot in the cache, or the source claim's path."""
        hub = self.spec.model.source.huggingface
        if hub is None:
            pvc = self.spec.model.source.pvc
            assert pvc is not None
            relative = pvc.path.strip("/")
            return SOURCE_MOUNT + (f"/{relative}" if relative else "")
        key = snapshot_key or "<snapshot key: the resolved commit's>"
        return f"{ENGINE_MOUNT}/{key}/{snapshot_directory(hub.repo)}"

    def argv(self, snapshot_key: str | None) -> list[str]:
        """The serving container's command."""
        return [
            TRTLLM_SERVE,
            self.snapshot_path(snapshot_key),
            "--backend", "pytorch",
            "--host", "0.0.0.0",
            "--port", str(HTTP_PORT),
            "--tp_size", str(self.parallelism.tensor),
            *(("--pp_size", str(self.parallelism.pipeline)) if self.parallelism.pipeline > 1 else ()),
            "--config", f"{CONFIG_MOUNT}/{CONFIG_FILE}",
        ]  # fmt: skip

    def group_segments(self, snapshot_key: str | None) -> tuple[Segment, ...]:
        """The world as the leader of a group across pods runs it: every rank under the LLM API launcher."""
        return (Segment(self.parallelism.world, (LLMAPI_LAUNCH, *self.argv(snapshot_key))),)

    def derived_summary(self) -> dict[str, Any]:
        """What was derived, under TensorRT-LLM's own names, for `mmctl render`."""
        hub = self.spec.model.source.huggingface
        effective = {**SERVE_DEFAULTS, **self.config}
        summary: dict[str, Any] = {
            "runtime": TRTLLM_SERVE,
            "model_type": self.knowledge.model_type.value,
            "architecture": self.knowledge.architecture,
            "modalities": [m.value for m in self.modalities],
            "chat_template": self.knowledge.chat_template,
            "tp_size": self.parallelism.tensor,
            **({"pp_size": self.parallelism.pipeline} if self.parallelism.pipeline > 1 else {}),
            "llm_args": effective,
            "weights": (
                {
                    "download_key": self.cache_key,
                    "repo": hub.repo,
                    "revision": hub.revision,
                    "commit": hub.revision if is_commit(hub.revision) else None,
                    "snapshot_key": self.cache_key if is_commit(hub.revision) else None,
                }
                if hub is not None
                else {"pvc": self.snapshot_path(None)}
            ),
            "versions": {
                "trtllm": versions.SERVE_TRTLLM_VERSION,
                "serving_image": self.serving_image,
                "base_image": versions.SERVE_BASE_IMAGE,
            },
            "pod_resources": [pod.model_dump(by_alias=True) for pod in self.resources.status()],
        }
        return summary

    def files(self) -> dict[str, str]:
        """Every file of the plan, relative to an output directory (what `mmctl render` writes)."""
        files = {
            "derived.json": json.dumps(self.derived_summary(), indent=2) + "\n",
            CONFIG_FILE: self.config_yaml,
            "launch.json": json.dumps({"argv": self.argv(self.artifact_location)}, indent=2) + "\n",
        }
        if self.download is not None:
            files["download_plan.json"] = self.download.model_dump_json(indent=2) + "\n"
        return files

    @property
    def download_commit(self) -> str | None:
        """The commit of a Hugging Face source that names one (then its snapshot key is `cache_key`)."""
        hub = self.spec.model.source.huggingface
        return hub.revision if hub is not None and is_commit(hub.revision) else None

    @property
    def artifact_location(self) -> str | None:
        """The snapshot's key in the cache claim when the spec alone tells it: a commit's.

        None for a branch or tag (the download Job resolves it) and for a PersistentVolumeClaim source.
        """
        return self.cache_key if self.download_commit is not None else None


def llm_args(spec: MultimodalDeploymentSpec, knowledge: ServeKnowledge) -> dict[str, Any]:
    """The `--config` YAML of `spec` as a mapping (only what the spec sets, plus what must be said)."""
    engine, serving = spec.engine, spec.serving
    kv_cache: dict[str, Any] = {
        "free_gpu_memory_fraction": serving.kv_cache_free_gpu_mem_fraction
        or DEFAULT_FREE_GPU_MEMORY_FRACTION,
        # The backend reuses blocks unless told not to; only types whose matrix says so may.
        "enable_block_reuse": serving.kv_cache_reuse and knowledge.kv_cache_reuse,
    }
    if engine.kv_cache_dtype == "fp8":
        kv_cache["dtype"] = "fp8"
    if serving.max_tokens_in_paged_kv_cache is not None:
        kv_cache["max_tokens"] = serving.max_tokens_in_paged_kv_cache
    config: dict[str, Any] = {
        "kv_cache_config": kv_cache,
        "enable_chunked_prefill": serving.chunked_context and knowledge.chunked_prefill,
        # /prometheus/metrics exists only with it.
        "return_perf_metrics": True,
    }
    optional = {
        "max_batch_size": engine.max_batch_size,
        "max_num_tokens": engine.max_num_tokens,
        "max_seq_len": engine.max_seq_len,
        "dtype": engine.dtype,
    }
    config.update({name: value for name, value in optional.items() if value is not None})
    return config


def plan_trtllm_serve(spec: MultimodalDeploymentSpec, gpu_kind: GpuKind | None = None) -> TrtllmServePlan:
    """The trtllm-serve plan of a valid spec.

    `gpu_kind` changes nothing: the weights' snapshot serves on any kind of GPU, so its pods go where the
    placement lets them.
    """
    del gpu_kind
    knowledge = serve_knowledge_of(spec.model.type)
    hub, pvc = spec.model.source.huggingface, spec.model.source.pvc
    download = None
    if hub is not None:
        download = DownloadPlan(key=weights_key(hub.repo, hub.revision), repo=hub.repo, revision=hub.revision)
        key = download.key
    else:
        assert pvc is not None
        identity = json.dumps({"pvc": pvc.claim_name, "path": "/" + pvc.path.strip("/")}, sort_keys=True)
        key = hashlib.sha256(identity.encode()).hexdigest()[:20]
    modalities = tuple(
        sorted(knowledge.modalities if spec.serving.modalities is None else set(spec.serving.modalities))
    )
    known = shape_of(hub.repo if hub else None, knowledge.checkpoints, knowledge.reference_checkpoint)
    if spec.engine.max_seq_len is not None:
        problems = context_problems(known, spec.engine.max_seq_len, "spec.engine.maxSeqLen")
        if problems:
            raise InvalidSpecError(problems)
    return TrtllmServePlan(
        spec=spec,
        knowledge=knowledge,
        cache_key=key,
        download=download,
        config=llm_args(spec, knowledge),
        serving_image=spec.serving.image or versions.TRTLLM_SERVE_IMAGE,
        parallelism=spec.parallelism,
        modalities=modalities,
        resources=pod_resources(spec, knowledge, modalities, download is not None),
        gpu_needs=_gpu_needs(spec, knowledge, known),
    )


def _gpu_needs(
    spec: MultimodalDeploymentSpec, knowledge: ServeKnowledge, known: KnownShape | None
) -> GpuNeeds:
    """What each GPU of the world must offer.

    Without `maxSeqLen` trtllm-serve takes the checkpoint's context, which the KV cache need not hold
    whole: one sequence of `maxNumTokens` is the least then. Without `maxBatchSize` (trtllm-serve's 2048
    is a ceiling, not a promise) the batch is not weighed.
    """
    engine = spec.engine
    needs = requirements(dtype=engine.dtype, kv_cache_dtype=engine.kv_cache_dtype)
    if known is None:
        return GpuNeeds(needs)
    size = checkpoint(spec, knowledge).parameters_b
    dtype = engine.dtype or "bfloat16"
    world = (spec.parallelism.tensor, spec.parallelism.pipeline)
    memory = estimate(
        known,
        parameters_b=size,
        weight_bytes=WEIGHT_BYTES[dtype],
        weights_basis=f"{size:g} B parameters at {engine.dtype or 'the checkpoint dtype (2 bytes)'} over "
        f"{world[0] * world[1]} rank(s)",
        world=world,
        kv_bytes=1 if engine.kv_cache_dtype == "fp8" else 2,
        max_seq_len=engine.max_seq_len or engine.max_num_tokens or DEFAULT_MAX_NUM_TOKENS,
        sequences=engine.max_batch_size or 1,
        cross_tokens=0,
        max_num_tokens=engine.max_num_tokens,
        pool_bytes=0,
        kv_fraction=spec.serving.kv_cache_free_gpu_mem_fraction or DEFAULT_FREE_GPU_MEMORY_FRACTION,
    )
    return GpuNeeds(needs, memory)


def checkpoint(spec: MultimodalDeploymentSpec, knowledge: ServeKnowledge) -> Checkpoint:
    """The size of the checkpoint served: known to the table, stated in its name, or the reference's."""
    known = {repo: shape.parameters_b for repo, shape in knowledge.checkpoints.items()}
    reference = knowledge.reference_checkpoint
    reference_b = known.get(reference) or knowledge.reference_parameters_b
    assert reference_b is not None, f"{knowledge.model_type}: no size of its reference checkpoint"
    return checkpoint_of(spec, reference=reference, reference_b=reference_b, known=known)


def serving_figures(
    spec: MultimodalDeploymentSpec, weights: Checkpoint, modalities: tuple[Modality, ...], *, serves: bool
) -> Figures:
    """A serving pod of `gpusPerPod` ranks; the one that `serves` also runs trtllm-serve's own process.

    Each pod maps the checkpoint's files while its ranks load them (page cache, charged to it).
    """
    ranks = spec.parallelism.gpus_per_pod
    shares = [Share("PyTorch backend rank", SERVE_RANK_MIB, ranks)]
    cpu = SERVE_RANK_CPU * ranks
    if serves:
        video = Modality.VIDEO in modalities
        what = "trtllm-serve process, with video frames" if video else "trtllm-serve process"
        shares.insert(0, Share(what, SERVER_PROCESS_MIB + (VIDEO_FRAMES_MIB if video else 0)))
        cpu += SERVER_PROCESS_CPU
    shares.append(Share("the checkpoint's files, mapped", weights.mib(BYTES_16_BITS)))
    return Figures(
        cpu_millis=cpu,
        processes=counted(shares),
        volumes=(Share("/dev/shm", shared_memory_mib(spec.serving.shared_memory_size)),),
        rests_on=weights.known_by,
    )


def pod_resources(
    spec: MultimodalDeploymentSpec,
    knowledge: ServeKnowledge,
    modalities: tuple[Modality, ...],
    downloads: bool,
) -> PlannedResources:
    """The download pod's (there is one for a Hub source; it asks for no GPU) and the serving pods'.

    With a replica across pods, a group's leader and workers.
    """
    weights = checkpoint(spec, knowledge)
    download = fixed(DOWNLOAD_CPU, DOWNLOAD_MIB, "huggingface_hub download")
    build = spec.build.pod.resources

    def figures(serves: bool) -> Figures:
        return serving_figures(spec, weights, modalities, serves=serves)

    serving, worker = serving_pods(spec.parallelism, spec.serving.pod.resources, SERVER_CONTAINER, figures)
    return PlannedResources(
        job=effective(download, build, "Download", DOWNLOAD_CONTAINER) if downloads else None,
        serving=serving,
        worker=worker,
    )
