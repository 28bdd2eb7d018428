"""What the triton-trtllm-engine runtime knows about each model type it serves, in one table (`KNOWLEDGE`).

How the checkpoint is converted, which `trtllm-build` and multimodal-engine flags the reference workflow
uses, how many visual features one image becomes, which request inputs the server can decode, the serving
defaults (from the Triton + TensorRT-LLM reference workflow, tensorrtllm_backend v0.19.0 templates and docs),
and the host memory its pods' processes hold (`HostMemory`). Adding a model type means adding one entry to
`_ENTRIES`. Pure data: imports only `shared` of ours and does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from mmd_operator.knowledge.shared import (
    LARGE_WORLD,
    NODE_WORLD,
    QWEN2_VL_7B,
    LanguageModelShape,
    Modality,
    ModelType,
)


class RepositoryLayout(StrEnum):
    """Which set of Triton model directories a model type is served by."""

    # ensemble -> preprocessing -> multimodal_encoders -> tensorrt_llm -> postprocessing (+ tensorrt_llm_bls)
    MULTIMODAL = "multimodal"
    # the InternLM-XComposer2 variant: preprocessing runs the ViT itself; LoRA inputs reach tensorrt_llm
    XCOMPOSER2 = "xcomposer2"
    # whisper_bls -> tensorrt_llm (encoder-decoder)
    WHISPER = "whisper"


class ImageInput(StrEnum):
    """Ways a request can carry an image; each maps to one ensemble input tensor."""

    TENSOR = "image_input"  # pixels already preprocessed by the client (FP16)
    BYTES = "image_bytes_input"  # raw RGB pixels (UINT8), decoded by the server's HF processor
    URL = "image_url_input"  # http(s) URL or `data:image/jpeg;base64,` string, fetched by the server


class VisionEngineRecipe(StrEnum):
    """Which program builds the vision engine, and so which plan file and tensor names serving finds."""

    # TensorRT-LLM's build_multimodal_engine.py: `model.engine`, tensors `input` -> `encoder_output`.
    TRTLLM = "trtllm"
    # The InternLM-XComposer2 fork's build_visual_engine.py, pinned in the builder image: the plan
    # `visual_encoder.engine` with tensors `input` -> `output`, which the fork's preprocessing loads.
    XCOMPOSER2_FORK = "xcomposer2_fork"


class VisionBatchRule(StrEnum):
    """What one unit of the vision engine's batch is."""

    PER_IMAGE = "per_image"  # engine batch x images per request
    PER_PATCH = "per_patch"  # engine batch x patches (or video frames) per request


@dataclass(frozen=True)
class BuildDefaults:
    """The reference workflow's build limits for a model type (used when the spec leaves them out)."""

    dtype: str
    max_batch_size: int
    max_input_len: int
    max_seq_len: int
    max_beam_width: int = 1
    max_num_tokens: int | None = None
    max_encoder_input_len: int | None = None
    # True when the encoder input length is a property of the model, not a choice (Whisper: 3000 frames).
    fixed_encoder_input_len: bool = False


@dataclass(frozen=True)
class ServingDefaults:
    """Serving options whose sensible value depends on the model type."""

    kv_cache_free_gpu_mem_fraction: float = 0.9
    exclude_input_in_output: bool = False
    batch_scheduler_policy: str = "guaranteed_no_evict"
    max_tokens_in_paged_kv_cache: int | None = None
    triton_max_batch_size: int | None = None  # None: the engine's max batch size
    # The beam width tensorrt_llm serves; None: the engine's. The executor refuses a request whose beam
    # width differs from it, so it must be what the entry point sends.
    max_beam_width: int | None = None


@dataclass(frozen=True)
class LoraCacheDefaults:
    """LoRA cache sizing rendered into `tensorrt_llm` for LoRA-capable model types."""

    optimal_adapter_size: int = 8
    max_adapter_size: int = 64
    gpu_memory_fraction: float = 0.05
    host_memory_bytes: int = 1 << 30


@dataclass(frozen=True)
class WhisperVariant:
    """One Whisper checkpoint family member, as TensorRT-LLM's converter names it."""

    name: str
    n_mels: int
    parameters_b: float  # billions, from its model card: sizes the build's host memory
    heads: int  # attention heads of each decoder layer (64 dimensions each in every size)
    decoder_layers: int
    distilled: bool
    english_only: bool

    def decoder(self) -> LanguageModelShape:
        """The decoder as the KV cache sees it: 448 target positions (`max_target_positions`)."""
        return LanguageModelShape(
            self.heads, self.heads, self.decoder_layers, self.parameters_b, head_dim=64, context=448
        )


@dataclass(frozen=True)
class HostMemory:
    """Host memory figures of a type's pods: estimates of what each process loads (docs/resource.md)."""

    parameters_b: float  # the reference checkpoint's, vision included (billions, from its model card)
    preprocessing_mib: int = 1024  # a preprocessing or whisper_bls instance: tokenizer, processor, buffers
    encoder_mib: int = 2560  # rank 0's multimodal_encoders: torch, TensorRT-LLM, CUDA, the engine read whole
    published_bytes: int = 2  # per parameter, as the type's checkpoints are published (BLIP-2's: 32 bits)


@dataclass(frozen=True)
class ModelKnowledge:
    """Everything model-type specific, for one model type."""

    model_type: ModelType
    title: str
    layout: RepositoryLayout
    encoder_decoder: bool
    reference_checkpoint: str
    # Hidden size of the reference checkpoint's LLM (d_model for Whisper); sizes the CUDA memory pool.
    reference_hidden_size: int
    converter: str  # path under TensorRT-LLM's examples directory
    converter_args: tuple[str, ...]
    build_plugin_args: tuple[str, ...]
    build: BuildDefaults
    host: HostMemory
    # trtllm-build plugin flags of a separately built encoder engine (Whisper's audio encoder).
    encoder_build_plugin_args: tuple[str, ...] = ()
    serving: ServingDefaults = field(default_factory=ServingDefaults)
    # Multimodal (vision) engine; None for model types without one.
    vision_model_type: str | None = None
    vision_engine_model_type: str | None = None  # builder_config.model_type written by the builder
    vision_extra_args: tuple[str, ...] = ()
    vision_recipe: VisionEngineRecipe = VisionEngineRecipe.TRTLLM
    vision_batch_rule: VisionBatchRule = VisionBatchRule.PER_IMAGE
    default_patches_per_request: int | None = None
    # Visual features (prompt-table rows) one image becomes; None when the LLM takes no prompt table.
    features_per_image: int | None = None
    encoder_input_dtype: str = "TYPE_FP16"
    needs_hf_model_path: bool = False
    multi_image: bool = False
    video: bool = False
    image_inputs: frozenset[ImageInput] = frozenset()
    text_only_requests: bool = False
    # Whether the entry points take `prompt_table_extra_id`: the reference's multimodal ensemble declares it
    # and its preprocessing turns it into per-token extra ids; without KV-cache reuse they change nothing.
    prompt_table_extra_id: bool = True
    # Whether KV-cache reuse can tell images apart (needs prompt_table_extra_id, see above).
    kv_cache_reuse: bool = True
    fp8_kv_cache: bool = False
    lora: bool = False
    lora_cache: LoraCacheDefaults | None = None
    # Whether tensorrt_llm_bls can serve this type (it must be able to pass every input preprocessing needs).
    bls: bool = True
    # Engine-path releases (`engine.tensorrtLlmVersion`) not offered for this type, each with why.
    refused_releases: tuple[tuple[str, str], ...] = ()
    chunked_context: bool = True
    # What a client sends as `text_input` (the server adds any chat wrapping itself).
    prompt_template: str = "{text}"
    image_marker: str | None = None
    # The server's processor refuses a prompt whose image markers do not number its images (mllama's
    # Hugging Face processor); other types insert or ignore them.
    one_marker_per_image: bool = False
    end_id: int | None = None  # None: the tokenizer's eos token
    pad_id: int | None = None  # None: the tokenizer's pad (or eos) token
    # Models Triton ranks other than 0 must load explicitly besides tensorrt_llm.
    rank_models: tuple[str, ...] = ()
    whisper_variants: tuple[WhisperVariant, ...] = ()
    # Known checkpoints of the type, by Hugging Face repository: heads, layers, context (config.json).
    checkpoints: Mapping[str, LanguageModelShape] = field(default_factory=dict)
    # Not offered: the reference workflow's launch runs "only tensor parallelism".
    pipeline_parallel: bool = False
    largest_world: int = LARGE_WORLD

    @property
    def has_vision_engine(self) -> bool:
        """Whether the build produces a separate multimodal (vision) engine."""
        return self.vision_model_type is not None

    @property
    def vision_engine_file(self) -> str:
        """The plan file of the vision engine inside the cache entry's encoder directory."""
        if self.vision_recipe is VisionEngineRecipe.XCOMPOSER2_FORK:
            return "visual_encoder.engine"
        return "model.engine"

    @property
    def image_urls(self) -> bool:
        """Whether the server can load images from URLs (`image_url_input`) for this type."""
        return ImageInput.URL in self.image_inputs

    @property
    def uses_prompt_table(self) -> bool:
        """Whether image features reach the LLM as a prompt table (and need `max_multimodal_len`)."""
        return self.features_per_image is not None

    @property
    def modalities(self) -> frozenset[Modality]:
        """What requests may carry besides text: images with a vision engine, video, audio for Whisper."""
        found = {Modality.IMAGE} if self.has_vision_engine else set()
        if self.video:
            found.add(Modality.VIDEO)
        if self.whisper_variants:
            found.add(Modality.AUDIO)
        return frozenset(found)

    def variant(self, name: str) -> WhisperVariant | None:
        """Return the Whisper variant called `name`, if this model type knows it."""
        return next((v for v in self.whisper_variants if v.name == name), None)


# In build arguments `{dtype}` stands for the engine dtype and `{gemm}` for the GEMM plugin type (the
# dtype, or `auto` when an fp8 checkpoint decides it).
_GEMM = ("--gemm_plugin", "{gemm}")

_WHISPER_VARIANTS = (
    WhisperVariant("large-v3", 128, 1.55, 20, 32, distilled=False, english_only=False),
    WhisperVariant("large-v3-turbo", 128, 0.81, 20, 4, distilled=False, english_only=False),
    WhisperVariant("large-v2", 80, 1.55, 20, 32, distilled=False, english_only=False),
    WhisperVariant("medium", 80, 0.77, 16, 24, distilled=False, english_only=False),
    WhisperVariant("small", 80, 0.24, 12, 12, distilled=False, english_only=False),
    WhisperVariant("base", 80, 0.074, 8, 6, distilled=False, english_only=False),
    WhisperVariant("tiny", 80, 0.039, 6, 4, distilled=False, english_only=False),
    WhisperVariant("medium.en", 80, 0.77, 16, 24, distilled=False, english_only=True),
    WhisperVariant("small.en", 80, 0.24, 12, 12, distilled=False, english_only=True),
    WhisperVariant("base.en", 80, 0.074, 8, 6, distilled=False, english_only=True),
    WhisperVariant("tiny.en", 80, 0.039, 6, 4, distilled=False, english_only=True),
)

_DISTIL_WHISPER_VARIANTS = (
    WhisperVariant("distil-large-v3", 128, 0.76, 20, 2, distilled=True, english_only=False),
    WhisperVariant("distil-large-v2", 80, 0.76, 20, 2, distilled=True, english_only=False),
    WhisperVariant("distil-medium.en", 80, 0.39, 16, 2, distilled=True, english_only=True),
    WhisperVariant("distil-small.en", 80, 0.17, 12, 2, distilled=True, english_only=True),
)

_WHISPER_DECODER_PLUGINS = (
    "--moe_plugin", "disable",
    "--gemm_plugin", "{gemm}",
    "--bert_attention_plugin", "{dtype}",
    "--gpt_attention_plugin", "{dtype}",
)  # fmt: skip
_WHISPER_ENCODER_PLUGINS = (
    "--moe_plugin", "disable", "--gemm_plugin", "disable", "--bert_attention_plugin", "{dtype}",
)  # fmt: skip

# Whisper's log-mel spectrogram: a hop of 160 samples at 16 kHz, so 3000 encoder frames are 30 s of audio.
WHISPER_SAMPLE_RATE = 16000
MEL_FRAMES_PER_SECOND = 100

_WHISPER_BUILD = BuildDefaults(
    dtype="float16",
    max_batch_size=64,
    # Decoder limits from the reference: a 14-token prompt and up to 100 generated tokens.
    max_input_len=14,
    max_seq_len=114,
    max_beam_width=4,
    max_encoder_input_len=3000,
    fixed_encoder_input_len=True,
)

_WHISPER_SERVING = ServingDefaults(
    kv_cache_free_gpu_mem_fraction=0.5,
    exclude_input_in_output=True,
    max_tokens_in_paged_kv_cache=24000,
    triton_max_batch_size=8,
    # The reference builds with beam width 4 but serves with 1: whisper_bls never sends a beam width, and
    # a served width of 4 would also reserve four times the decoder KV cache.
    max_beam_width=1,
)

_WHISPER = ModelKnowledge(
    model_type=ModelType.WHISPER,
    title="Whisper",
    layout=RepositoryLayout.WHISPER,
    encoder_decoder=True,
    reference_checkpoint="openai/whisper-large-v3",
    reference_hidden_size=1280,
    converter="whisper/convert_checkpoint.py",
    converter_args=(),
    build_plugin_args=_WHISPER_DECODER_PLUGINS,
    encoder_build_plugin_args=_WHISPER_ENCODER_PLUGINS,
    build=_WHISPER_BUILD,
    host=HostMemory(1.55, preprocessing_mib=1536),
    serving=_WHISPER_SERVING,
    # whisper_bls has no such input.
    prompt_table_extra_id=False,
    kv_cache_reuse=False,
    chunked_context=False,
    # whisper_bls is the entry point; tensorrt_llm_bls has nothing to offer here.
    bls=False,
    prompt_template="<|startoftranscript|><|en|><|transcribe|><|notimestamps|>",
    end_id=50257,
    pad_id=50257,
    rank_models=("whisper_bls",),
    largest_world=NODE_WORLD,  # the largest Whisper (1.5 B parameters) fits one GPU
    whisper_variants=_WHISPER_VARIANTS,
)

_PROMPT_TABLE_SERVERS = frozenset({ImageInput.BYTES, ImageInput.URL})

_ENTRIES = (
    ModelKnowledge(
        model_type=ModelType.BLIP2,
        title="BLIP-2 (OPT)",
        layout=RepositoryLayout.MULTIMODAL,
        encoder_decoder=False,
        reference_checkpoint="Salesforce/blip2-opt-2.7b",
        checkpoints={
            "Salesforce/blip2-opt-2.7b": LanguageModelShape(32, 32, 32, 3.8, head_dim=80, context=2048)
        },
        reference_hidden_size=2560,
        converter="opt/convert_checkpoint.py",
        converter_args=("--model_type", "blip2"),
        build_plugin_args=_GEMM,
        build=BuildDefaults(dtype="float16", max_batch_size=8, max_input_len=924, max_seq_len=1024),
        host=HostMemory(3.8, encoder_mib=4096, published_bytes=4),
        vision_model_type="blip2",
        vision_engine_model_type="blip2-opt",
        features_per_image=32,
        image_inputs=frozenset({ImageInput.TENSOR}),
        prompt_template="Question: {text} Answer:",
        rank_models=("multimodal_encoders",),
        largest_world=NODE_WORLD,  # the largest BLIP-2 (OPT-6.7b, Flan-T5-XXL) fits one GPU
    ),
    ModelKnowledge(
        model_type=ModelType.LLAVA,
        title="LLaVA-1.5",
        layout=RepositoryLayout.MULTIMODAL,
        encoder_decoder=False,
        reference_checkpoint="llava-hf/llava-1.5-7b-hf",
        checkpoints={
            "llava-hf/llava-1.5-7b-hf": LanguageModelShape(32, 32, 32, 7.06, context=4096),
            "llava-hf/llava-1.5-13b-hf": LanguageModelShape(40, 40, 40, 13.4, context=4096),
        },
        reference_hidden_size=4096,
        converter="llama/convert_checkpoint.py",
        converter_args=(),
        build_plugin_args=_GEMM,
        build=BuildDefaults(dtype="float16", max_batch_size=8, max_input_len=2048, max_seq_len=2560),
        host=HostMemory(7.06),
        vision_model_type="llava",
        vision_engine_model_type="llava",
        features_per_image=576,
        image_inputs=frozenset({ImageInput.TENSOR}),
        fp8_kv_cache=True,
        rank_models=("multimodal_encoders",),
    ),
    ModelKnowledge(
        model_type=ModelType.VILA,
        title="VILA-1.5 (multi-image)",
        layout=RepositoryLayout.MULTIMODAL,
        encoder_decoder=False,
        reference_checkpoint="Efficient-Large-Model/vila1.5-3b",
        checkpoints={"Efficient-Large-Model/vila1.5-3b": LanguageModelShape(20, 20, 32, 3.1, context=4096)},
        reference_hidden_size=2560,
        converter="llama/convert_checkpoint.py",
        converter_args=(),
        build_plugin_args=_GEMM,
        build=BuildDefaults(dtype="float16", max_batch_size=8, max_input_len=2048, max_seq_len=2560),
        host=HostMemory(3.1),
        vision_model_type="vila",
        vision_engine_model_type="vila",
        # The VILA builder imports the VILA git repository; the builder image carries it at this path.
        vision_extra_args=("--vila_path", "/opt/VILA"),
        features_per_image=196,
        multi_image=True,
        image_inputs=frozenset({ImageInput.TENSOR}),
        fp8_kv_cache=True,
        prompt_template="<image>\n{text}",
        image_marker="<image>",
        rank_models=("multimodal_encoders",),
    ),
    ModelKnowledge(
        model_type=ModelType.LLAVA_ONEVISION,
        title="LLaVA-OneVision (images and video)",
        layout=RepositoryLayout.MULTIMODAL,
        encoder_decoder=False,
        reference_checkpoint="llava-hf/llava-onevision-qwen2-7b-ov-hf",
        checkpoints={
            "llava-hf/llava-onevision-qwen2-7b-ov-hf": LanguageModelShape(28, 4, 28, 8.03, context=32768)
        },
        reference_hidden_size=3584,
        converter="qwen/convert_checkpoint.py",
        converter_args=(),
        build_plugin_args=_GEMM,
        build=BuildDefaults(dtype="float16", max_batch_size=1, max_input_len=7500, max_seq_len=7600),
        host=HostMemory(8.03, preprocessing_mib=3072),
        vision_model_type="llava_onevision",
        vision_engine_model_type="llava_onevision",
        vision_batch_rule=VisionBatchRule.PER_PATCH,
        default_patches_per_request=16,
        # Upper bound of visual tokens per request (any-resolution patches or pooled video frames).
        features_per_image=7300,
        needs_hf_model_path=True,
        video=True,
        image_inputs=_PROMPT_TABLE_SERVERS,
        fp8_kv_cache=True,
        end_id=151645,
        rank_models=("multimodal_encoders",),
        refused_releases=(
            (
                "1.2.1",
                "TensorRT-LLM 1.2.x's preprocessing gives an image a 3-D IMAGE_SIZES ([batch, 1, 2]) "
                "that its multimodal_encoders code still reads as one [2] size per image (the release's "
                "own config marks llava as broken there), and that path is no longer maintained upstream",
            ),
        ),
    ),
    ModelKnowledge(
        model_type=ModelType.MLLAMA,
        title="Llama 3.2 Vision (MLLaMA)",
        layout=RepositoryLayout.MULTIMODAL,
        encoder_decoder=True,
        reference_checkpoint="meta-llama/Llama-3.2-11B-Vision",
        checkpoints={
            # 40 layers, 8 of them cross-attention (counted as self-attention: an upper bound).
            "meta-llama/Llama-3.2-11B-Vision": LanguageModelShape(32, 8, 40, 10.7, context=131072),
            "meta-llama/Llama-3.2-11B-Vision-Instruct": LanguageModelShape(32, 8, 40, 10.7, context=131072),
        },
        reference_hidden_size=4096,
        converter="mllama/convert_checkpoint.py",
        converter_args=(),
        build_plugin_args=("--gemm_plugin", "auto"),
        build=BuildDefaults(
            dtype="bfloat16",
            max_batch_size=8,
            max_input_len=1024,
            max_seq_len=2048,
            max_num_tokens=4096,
            max_encoder_input_len=6404,
        ),
        host=HostMemory(10.7, preprocessing_mib=2048, encoder_mib=4096),
        vision_model_type="mllama",
        vision_engine_model_type="mllama",
        encoder_input_dtype="TYPE_BF16",
        needs_hf_model_path=True,
        image_inputs=_PROMPT_TABLE_SERVERS,
        text_only_requests=True,
        # Cross-attention KV blocks depend on the image, which the block hash does not see. The extra id is
        # still taken, as the reference's preprocessing takes it; without a prompt table the backend drops it.
        kv_cache_reuse=False,
        chunked_context=False,
        # The v0.19.0 BLS neither sends mllama's aspect-ratio tensors to the encoder nor passes its
        # encoder features on to tensorrt_llm (tensorrtllm_backend#669): the ensemble is the entry point.
        bls=False,
        prompt_template="<|image|><|begin_of_text|>{text}",
        one_marker_per_image=True,
        image_marker="<|image|>",
        end_id=128001,
        pad_id=128004,
        rank_models=("multimodal_encoders",),
    ),
    ModelKnowledge(
        model_type=ModelType.QWEN2_VL,
        title="Qwen2-VL",
        layout=RepositoryLayout.MULTIMODAL,
        encoder_decoder=False,
        reference_checkpoint="Qwen/Qwen2-VL-7B-Instruct",
        checkpoints={"Qwen/Qwen2-VL-7B-Instruct": QWEN2_VL_7B},
        reference_hidden_size=3584,
        converter="qwen/convert_checkpoint.py",
        converter_args=(),
        build_plugin_args=("--gemm_plugin", "{gemm}", "--gpt_attention_plugin", "{dtype}"),
        build=BuildDefaults(dtype="float16", max_batch_size=4, max_input_len=2048, max_seq_len=3072),
        host=HostMemory(8.29, preprocessing_mib=2048, encoder_mib=3584),
        vision_model_type="qwen2_vl",
        vision_engine_model_type="qwen2_vl",
        # 504x504 images become 18x18 merged patches.
        features_per_image=324,
        needs_hf_model_path=True,
        image_inputs=_PROMPT_TABLE_SERVERS,
        # The v0.19 preprocessing never builds the extra ids for qwen2_vl and then fails on the undefined
        # name, so the input is not declared: Triton refuses it before any model runs.
        prompt_table_extra_id=False,
        kv_cache_reuse=False,
        fp8_kv_cache=True,
        end_id=151645,
        rank_models=("multimodal_encoders",),
    ),
    ModelKnowledge(
        model_type=ModelType.INTERNLM_XCOMPOSER2,
        title="InternLM-XComposer2-VL with LoRA",
        layout=RepositoryLayout.XCOMPOSER2,
        encoder_decoder=False,
        reference_checkpoint="internlm/internlm-xcomposer2-vl-7b",
        checkpoints={"internlm/internlm-xcomposer2-vl-7b": LanguageModelShape(32, 8, 32, 8.6)},
        reference_hidden_size=4096,
        converter="internlm2/convert_checkpoint.py",
        converter_args=(),
        build_plugin_args=("--gemm_plugin", "{gemm}", "--lora_plugin", "{dtype}"),
        build=BuildDefaults(dtype="float16", max_batch_size=48, max_input_len=1536, max_seq_len=2048),
        host=HostMemory(8.6, preprocessing_mib=3072),
        # The reference's repository: Triton batch 32 under an engine batch of 48 (64 in the fork era).
        serving=ServingDefaults(
            exclude_input_in_output=True, batch_scheduler_policy="max_utilization", triton_max_batch_size=32
        ),
        # The reference serves this type with the fork's preprocessing, which runs the ViT itself from a
        # plan built by the fork's own recipe; the fork records the Hub id as the engine's model type.
        vision_model_type="internlm-xcomposer2-vl-7b",
        vision_engine_model_type="internlm/internlm-xcomposer2-vl-7b",
        vision_recipe=VisionEngineRecipe.XCOMPOSER2_FORK,
        # 490x490 images at patch 14 become 35x35 features.
        features_per_image=1225,
        image_inputs=frozenset({ImageInput.TENSOR}),
        # This preprocessing requires the image, which tensorrt_llm_bls has no way to pass on.
        bls=False,
        # The fork's ensemble carries no prompt_table_extra_id, so cached blocks could not tell images apart.
        prompt_table_extra_id=False,
        kv_cache_reuse=False,
        lora=True,
        lora_cache=LoraCacheDefaults(
            optimal_adapter_size=256,
            max_adapter_size=256,
            gpu_memory_fraction=0.3,
            host_memory_bytes=2 << 30,
        ),
        prompt_template=(
            "[UNUSED_TOKEN_146]user\n<ImageHere>{text}[UNUSED_TOKEN_145]\n[UNUSED_TOKEN_146]assistant\n"
        ),
        image_marker="<ImageHere>",
        end_id=92542,
    ),
    _WHISPER,
    # Same recipe and serving; the converter first turns the Hugging Face layout into OpenAI's.
    replace(
        _WHISPER,
        model_type=ModelType.DISTIL_WHISPER,
        title="Distil-Whisper",
        reference_checkpoint="distil-whisper/distil-large-v3",
        host=HostMemory(0.76, preprocessing_mib=1536),
        whisper_variants=_DISTIL_WHISPER_VARIANTS,
    ),
)

KNOWLEDGE: MappingProxyType[ModelType, ModelKnowledge] = MappingProxyType(
    {entry.model_type: entry for entry in _ENTRIES}
)


def knowledge_of(model_type: ModelType | str) -> ModelKnowledge:
    """Return the knowledge entry of `model_type`."""
    return KNOWLEDGE[ModelType(model_type)]


def types_where(predicate: str) -> list[str]:
    """Return the names of the model types whose attribute `predicate` is set (true or not empty), sorted."""
    return sorted(t.value for t, k in KNOWLEDGE.items() if getattr(k, predicate))
