"""The cross-field rules of TorchLlmArgs and its config classes that the double checks, in the real words.

Each rule is one pydantic validator of TensorRT-LLM's `tensorrt_llm/llmapi/llm_args.py` (the version read:
file index id 7019226376, see docs/development/trtllm-serve-double.md), rewritten here because the facts
script reads the sources and never runs them. `CHECKED` maps (class, method) to the rule and to where the
validator lies in the file read (the character offset `find_string` reports, where the index reaches it: it
searches a file's first 100,000 characters); `NOT_CHECKED` names the other validators of the classes the
double models, with why. A test holds both tables to the facts' list of validators, and each message to the
text the facts record for it. Imports pydantic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, field_validator, model_validator


@dataclass(frozen=True)
class Rule:
    """One validator of llm_args.py as the double runs it."""

    check: Callable[..., Any]
    mode: str  # "after" (model_validator on the instance) or "before" (field_validator on the raw value)
    where: str  # where the validator lies in the file read
    fields: tuple[str, ...] = ()


def cuda_graph_batch_sizes(config: Any) -> Any:
    """max_batch_size, when set, must be the largest of batch_sizes (the real one then sorts them)."""
    if config.batch_sizes:
        config.batch_sizes = sorted(config.batch_sizes)
        derived_max = max(config.batch_sizes)
        if config.max_batch_size == 0:
            config.max_batch_size = derived_max
        elif config.max_batch_size != derived_max:
            raise ValueError(
                "CudaGraphConfig.max_batch_size is incompatible with "
                "CudaGraphConfig.batch_sizes. When both are provided, "
                "max_batch_size must equal max(batch_sizes).\n"
                f"CudaGraphConfig.batch_sizes: {config.batch_sizes}, "
                f"max(batch_sizes): {derived_max}, "
                f"CudaGraphConfig.max_batch_size: {config.max_batch_size}"
            )
    return config


def attention_dp_iterations(config: Any) -> Any:
    """With enable_balance, neither iteration count may be negative."""
    if config.enable_balance:
        if config.batching_wait_iters < 0:
            raise ValueError(
                "attention_dp_config.batching_wait_iters must be greater or equal to 0 "
                "when enable_balance is true"
            )
        if config.timeout_iters < 0:
            raise ValueError(
                "attention_dp_config.timeout_iters must be greater or equal to 0 when enable_balance is true"
            )
    return config


def calibration_file_for_collect(config: Any) -> Any:
    """COLLECT mode needs a calibration file path."""
    if config.calibration_mode == "COLLECT" and not config.calibration_file_path:
        raise ValueError(
            f"Expect calibration_file_path not to be empty when work on {config.calibration_mode} mode"
        )
    return config


def ray_placement(config: Any) -> Any:
    """Placement groups and bundle indices together and of one length; a GPU share in (0, 1].

    The real validator then requires Ray PlacementGroup objects, which a YAML file cannot hold: the double
    stops at the checks a YAML value can pass or fail.
    """
    has_groups = config.placement_groups is not None
    has_indices = config.placement_bundle_indices is not None
    if has_groups != has_indices:
        raise ValueError("placement_groups and placement_bundle_indices must be provided together")
    if has_groups and len(config.placement_groups) != len(config.placement_bundle_indices):
        raise ValueError(
            f"placement_groups length ({len(config.placement_groups)}) must equal "
            f"placement_bundle_indices length ({len(config.placement_bundle_indices)})"
        )
    if config.per_worker_gpu_share is not None and not (0 < config.per_worker_gpu_share <= 1.0):
        raise ValueError(f"per_worker_gpu_share must be between 0 and 1.0, got {config.per_worker_gpu_share}")
    return config


def no_lora_prefetch(args: Any) -> Any:
    """peft_cache_config.lora_prefetch_dir is refused: LoRA prefetch is not supported."""
    peft = args.peft_cache_config
    if peft is not None and peft.lora_prefetch_dir is not None:
        raise ValueError(
            f"lora_prefetch_dir was set to '{peft.lora_prefetch_dir}' while LoRA prefetch is not supported"
        )
    return args


def ray_worker_extension_needs_ray(args: Any) -> Any:
    """ray_worker_extension_cls only with orchestrator_type ray."""
    if args.ray_worker_extension_cls is not None and args.orchestrator_type != "ray":
        raise ValueError("ray_worker_extension_cls is only supported with orchestrator_type='ray'")
    return args


def ray_placement_needs_ray(args: Any) -> Any:
    """ray_placement_config only with orchestrator_type ray."""
    if args.ray_placement_config is not None and args.orchestrator_type != "ray":
        raise ValueError("ray_placement_config is only supported with orchestrator_type='ray'")
    return args


LOAD_FORMATS = ("AUTO", "DUMMY", "VISION_ONLY")  # LoadFormat's members; a test holds them to the facts


def load_format_name(value: Any) -> Any:
    """A load_format string must name a LoadFormat member, in any case."""
    if isinstance(value, str) and value.upper() not in LOAD_FORMATS:
        raise ValueError(f"Invalid LoadFormat: {value}")
    return value


CHECKED: dict[tuple[str, str], Rule] = {
    ("CudaGraphConfig", "validate_cuda_graph_config"): Rule(
        cuda_graph_batch_sizes, "after", "character 4590"
    ),
    ("AttentionDpConfig", "validate_attention_dp_config"): Rule(
        attention_dp_iterations, "after", "character 18717"
    ),
    ("LayerwiseBenchmarksConfig", "validate_calibration_file_path"): Rule(
        calibration_file_for_collect, "after", "character 32438"
    ),
    ("RayPlacementConfig", "validate_ray_placement"): Rule(ray_placement, "after", "character 55253"),
    ("BaseLlmArgs", "validate_peft_cache_config"): Rule(no_lora_prefetch, "after", "character 98566"),
    # Past the index's first 100,000 characters: named by class and method only.
    ("TorchLlmArgs", "validate_ray_worker_extension_cls"): Rule(
        ray_worker_extension_needs_ray, "after", "TorchLlmArgs, near the end of the class"
    ),
    ("TorchLlmArgs", "validate_ray_placement_config"): Rule(
        ray_placement_needs_ray, "after", "TorchLlmArgs, after validate_ray_worker_extension_cls"
    ),
    ("TorchLlmArgs", "convert_load_format"): Rule(
        load_format_name, "before", "TorchLlmArgs, after its `backend` field", fields=("load_format",)
    ),
}

NOT_CHECKED: dict[tuple[str, str], str] = {
    ("BaseLlmArgs", "coerce_env_overrides_to_str"): "converts values, refuses nothing",
    ("BaseLlmArgs", "validate_dtype"): "reads the GPU's compute capability",
    ("BaseLlmArgs", "validate_gpus_per_node"): "counts GPUs",
    ("BaseLlmArgs", "normalize_optional_fields_to_defaults"): "fills defaults, refuses nothing",
    ("BaseLlmArgs", "validate_parallel_config"): "builds the parallel mapping, refuses nothing",
    ("BaseLlmArgs", "validate_and_init_tokenizer"): "loads the tokenizer (the double has none)",
    ("BaseLlmArgs", "validate_runtime_args"): "only logs a warning",
    ("BaseLlmArgs", "validate_lora_config_consistency"): "only logs warnings and fills defaults",
    ("TorchLlmArgs", "set_model_format"): "records the format, refuses nothing",
    ("TorchLlmArgs", "validate_speculative_config"): "speculative configs are not modelled (any value)",
    ("TorchLlmArgs", "validate_checkpoint_format"): "fills defaults, refuses nothing",
    ("TorchLlmArgs", "validate_load_balancer"): "reads the load balancer file named",
    ("TorchLlmArgs", "sync_quant_config_with_kv_cache_config_dtype"): "converts, only warns",
    ("TorchLlmArgs", "validate_helix_tokens_per_block"): "needs CpType (mapping.py, not read)",
    ("CpConfig", "validate_cp_type"): "upper-cases the value, refuses nothing",
    ("TorchCompileConfig", "validate_capture_num_tokens"): "sorts, refuses nothing",
    ("TorchCompileConfig", "set_default_capture_num_tokens"): "fills a default, refuses nothing",
}


def validators_of(class_name: str, methods: list[str]) -> dict[str, Any]:
    """The pydantic validators of `class_name` for `create_model`, from the methods the facts list."""
    built: dict[str, Any] = {}
    for method in methods:
        rule = CHECKED.get((class_name, method))
        if rule is None:
            continue
        if rule.mode == "before":
            built[method] = field_validator(*rule.fields, mode="before")(_as_classmethod(rule.check))
        else:
            built[method] = model_validator(mode="after")(rule.check)
    return built


def _as_classmethod(check: Callable[[Any], Any]) -> Any:
    def validate(cls: type[BaseModel], value: Any) -> Any:
        del cls
        return check(value)

    return classmethod(validate)
