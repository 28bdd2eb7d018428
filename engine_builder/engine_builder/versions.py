"""The releases we build and serve with, one row each, with everything pinned together in a row.

Engines only load in a server built with the same TensorRT-LLM, and the rendered configs follow the
model-repository contract of one release's templates. An engine-path release (`EngineRelease`) pins the
Triton image, its TensorRT-LLM, where the Python model code and the example scripts come from, and the
tensor names that changed between releases; the trtllm-serve runtime's releases (`ServeRelease`) pin the
TensorRT-LLM release image. Adding a release is one row here plus its templates' differences and its
doubles (docs/development/engine-path-versions.md). Pure constants and frozen dataclasses; imports only
the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

IMAGE_VERSION = "0.1.0"
# Where the builder image keeps TensorRT-LLM's example scripts (checkpoint converters and friends).
TRTLLM_EXAMPLES_DIR = "/opt/tensorrt_llm/examples"
MODEL_CODE_DIR = "/opt/mmd-operator/all_models"


@dataclass(frozen=True)
class EngineRelease:
    """One release of the engine path: a Triton `trtllm-python-py3` image and what goes with it."""

    tensorrt_llm: str
    triton: str
    # TensorRT, whose engines load only in the TensorRT that built them.
    tensorrt: str
    # The host driver the image's CUDA was built with (server docs/introduction/compatibility.md).
    cuda_driver: str
    # Where the Triton Python model code (all_models/) of this release lives: repository, tag, directory.
    template_repository: str
    template_tag: str
    template_dir: str
    # Example scripts that moved from their 0.19.0 place, by the directory they moved from.
    moved_examples: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # Request tensors the release's templates and C++ backend name differently from 0.19.0's.
    renamed_inputs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # The multimodal preprocessing's config is given `hf_model_path` (the checkpoint's processor): one 1.x
    # version read requires it, the other ignores it (docs/development/engine-path-versions.md, section 8).
    preprocessing_reads_hf_model_path: bool = False

    @property
    def base_image(self) -> str:
        """The NGC Triton image with TensorRT-LLM that the builder and serving images start from."""
        return f"nvcr.io/nvidia/tritonserver:{self.triton}-trtllm-python-py3"

    @property
    def template_revision(self) -> str:
        """The templates' source, as `mmctl render` shows it."""
        return f"{self.template_repository.rsplit('/', 1)[-1]} {self.template_tag}"

    @property
    def builder_image(self) -> str:
        """Our build image: the base plus this package and the TensorRT-LLM examples at the same tag."""
        return f"ghcr.io/mmd-operator/engine-builder:{IMAGE_VERSION}-trtllm{self.tensorrt_llm}"

    @property
    def serving_image(self) -> str:
        """Our serving image: the base plus the release's Python model code under MODEL_CODE_DIR.

        The NGC image ships the backends, not that code; it is laid out as all_models/.
        """
        return f"ghcr.io/mmd-operator/serving:{IMAGE_VERSION}-trtllm{self.tensorrt_llm}"

    def example(self, script: str) -> str:
        """Path of the example `script` (named as at 0.19.0) under TRTLLM_EXAMPLES_DIR in this release."""
        directory, _, rest = script.partition("/")
        moved = self.moved_examples.get(directory) if rest else None
        return f"{TRTLLM_EXAMPLES_DIR}/{moved}/{rest}" if moved else f"{TRTLLM_EXAMPLES_DIR}/{script}"

    def input_name(self, name: str) -> str:
        """The name this release gives the request tensor called `name` at 0.19.0."""
        return self.renamed_inputs.get(name, name)


# From 0.20 the example scripts live under models/core/ (models/contrib/ for OPT), and from the 1.x line
# the model code under triton_backend/ of TensorRT-LLM itself (the reference workflow's path table).
_MODELS_CORE = ("llama", "qwen", "mllama", "internlm2", "whisper", "multimodal")
ENGINE_RELEASES: Mapping[str, EngineRelease] = MappingProxyType(
    {
        # Triton 25.05: the last tensorrtllm_backend release with all_models/ of its own.
        "0.19.0": EngineRelease(
            tensorrt_llm="0.19.0",
            triton="25.05",
            tensorrt="10.9.0.34",
            cuda_driver="570.124.06",
            template_repository="triton-inference-server/tensorrtllm_backend",
            template_tag="v0.19.0",
            template_dir="all_models",
        ),
        # Triton 26.04-26.07 (26.07 pinned): the engine path's last release. The multimodal and whisper
        # templates are end-of-life at 1.2 and removed after it (docs/engine-path-end.md).
        "1.2.1": EngineRelease(
            tensorrt_llm="1.2.1",
            triton="26.07",
            tensorrt="10.14.1.48",
            cuda_driver="590.44.01",
            template_repository="NVIDIA/TensorRT-LLM",
            template_tag="v1.2.1",
            template_dir="triton_backend/all_models",
            moved_examples=MappingProxyType(
                {"opt": "models/contrib/opt", **{name: f"models/core/{name}" for name in _MODELS_CORE}}
            ),
            renamed_inputs=MappingProxyType({"min_length": "min_tokens", "random_seed": "seed"}),
            preprocessing_reads_hf_model_path=True,
        ),
    }
)
# The default while 1.2.1's images need a 590-branch driver (CUDA 13.1) on every GPU node.
DEFAULT_ENGINE_RELEASE = ENGINE_RELEASES["0.19.0"]

# The default release written out, for the Dockerfile's arguments and the chart's defaults.
TRTLLM_VERSION = DEFAULT_ENGINE_RELEASE.tensorrt_llm
BASE_IMAGE = DEFAULT_ENGINE_RELEASE.base_image
TEMPLATE_TAG = DEFAULT_ENGINE_RELEASE.template_tag
BUILDER_IMAGE = DEFAULT_ENGINE_RELEASE.builder_image
SERVING_IMAGE = DEFAULT_ENGINE_RELEASE.serving_image

# InternLM-XComposer2's vision engine comes from the recipe the reference workflow points at: the
# build_visual_engine.py of the fork its serving code was written for (branch dev/internlm-xcomposer2),
# pinned to one commit and fetched into the builder image at XCOMPOSER2_VISION_BUILDER. Its serving code
# (the preprocessing that runs that plan) comes from the backend fork at XCOMPOSER2_BACKEND_COMMIT.
XCOMPOSER2_FORK_REPOSITORY = "Njuapp/TensorRT-LLM"
XCOMPOSER2_FORK_COMMIT = "3d5cd357f458e242a34fae9df565bbcdcd6b5ba9"
XCOMPOSER2_VISION_BUILDER = "/opt/internlm-xcomposer2/build_visual_engine.py"
XCOMPOSER2_BACKEND_REPOSITORY = "Howe-Young/tensorrtllm_backend"
XCOMPOSER2_BACKEND_COMMIT = "76a0d1f53335a9f08b6a750c278651458813948e"


@dataclass(frozen=True)
class ServeRelease:
    """One release of the trtllm-serve runtime: TensorRT-LLM's release image and what differs with it."""

    tensorrt_llm: str
    # Only a final release is served; a release candidate's row records what will change.
    final: bool
    # The gauges its /prometheus/metrics has besides the request counters and latency histograms.
    gauges: tuple[str, ...] = ()
    # Open MPI 5 (from the 1.3 candidates' images) tells the ranks of a world across pods apart by
    # PMIX_HOSTNAME, which must then differ per pod.
    needs_pmix_hostname: bool = False

    @property
    def base_image(self) -> str:
        """TensorRT-LLM's release image."""
        return f"nvcr.io/nvidia/tensorrt-llm/release:{self.tensorrt_llm}"

    @property
    def serving_image(self) -> str:
        """Ours: the base with nothing of ours added but the image contract.

        The contract (docs/trtllm-serve-runtime.md#the-image-contract): `trtllm-serve` on the PATH, uid 1000.
        """
        return f"ghcr.io/mmd-operator/trtllm-serve:{IMAGE_VERSION}-trtllm{self.tensorrt_llm}"


# The `trtllm-serve` command line and LlmArgs field names the generated `--config` YAML and argv follow
# are the served release's (the facts the trtllm-serve double is built from,
# testbed/mmd_testbed/trtllm_serve/trtllm_serve_facts.json, record their own pinned version).
SERVE_RELEASES: Mapping[str, ServeRelease] = MappingProxyType(
    {
        "1.2.1": ServeRelease(tensorrt_llm="1.2.1", final=True),
        # Not final (docs/trtllm-serve-runtime.md, "The next release"): `--config` stays (an alias of
        # --extra_llm_api_options since 1.2), the snapshot is downloaded by us (so --hf_revision does not
        # matter), the gauges our autoscaling wants appear, and multi-node needs PMIX_HOSTNAME per pod.
        "1.3.0": ServeRelease(
            tensorrt_llm="1.3.0",
            final=False,
            gauges=(
                "trtllm_num_requests_waiting",
                "trtllm_num_requests_running",
                "trtllm_kv_cache_utilization",
                "trtllm_kv_cache_hit_rate",
            ),
            needs_pmix_hostname=True,
        ),
    }
)
DEFAULT_SERVE_RELEASE = SERVE_RELEASES["1.2.1"]
SERVE_TRTLLM_VERSION = DEFAULT_SERVE_RELEASE.tensorrt_llm
SERVE_BASE_IMAGE = DEFAULT_SERVE_RELEASE.base_image
TRTLLM_SERVE_IMAGE = DEFAULT_SERVE_RELEASE.serving_image
