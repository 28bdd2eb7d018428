"""The double uses exactly the data file's facts; the script that writes the file reads sources right."""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from pathlib import Path

import click
from pydantic import BaseModel

from mmd_testbed.trtllm_serve import cli, config, rules, server
from mmd_testbed.trtllm_serve.facts import load
from tools.trtllm_serve import extract_facts

FACTS = load()


def test_the_serve_command_declares_exactly_the_facts_options() -> None:
    group = cli.build(FACTS)
    assert set(group.commands) == set(FACTS.subcommands)
    serve = group.commands["serve"]
    arguments = [p for p in serve.params if isinstance(p, click.Argument)]
    assert [a.name for a in arguments] == list(FACTS.arguments)
    options = {p.name: p for p in serve.params if isinstance(p, click.Option)}
    assert list(options) == [o.dest for o in FACTS.options]
    kinds = {"int": click.INT, "float": click.FLOAT, "str": click.STRING}
    for fact in FACTS.options:
        option = options[fact.dest]
        assert tuple(option.opts) == fact.names, fact.dest
        assert option.is_flag == fact.is_flag and option.multiple == fact.multiple, fact.dest
        assert option.default == (fact.default if not fact.multiple else (fact.default or ())), fact.dest
        if fact.kind in kinds:
            assert option.type is kinds[fact.kind], fact.dest
        elif fact.kind == "choice" and fact.choices is not None:
            assert isinstance(option.type, click.Choice) and tuple(option.type.choices) == fact.choices
        elif fact.kind == "path":
            assert isinstance(option.type, click.Path) and option.type.exists == fact.must_exist
    log_level = options["log_level"].type
    assert isinstance(log_level, click.Choice) and tuple(log_level.choices) == FACTS.log_levels
    assert options["tensor_parallel_size"].opts == ["--tensor_parallel_size", "--tp_size"]
    assert options["extra_llm_api_options"].opts == ["--config", "--extra_llm_api_options"]
    assert (options["host"].default, options["port"].default) == ("localhost", 8000)


def test_the_config_models_have_exactly_the_facts_fields() -> None:
    models = config.ArgsModels(FACTS.llm_args)
    for name, fields in [(FACTS.llm_args.class_name, FACTS.llm_args.fields), *FACTS.llm_args.classes.items()]:
        model: type[BaseModel] = models.model(name)
        assert model.__name__ == name
        assert set(model.model_fields) == set(fields), name
        assert model.model_config.get("extra") == "forbid", name
    assert FACTS.llm_args.extra_forbidden
    assert {"kv_cache_config", "scheduler_config", "return_perf_metrics", "enable_chunked_prefill"} <= set(
        FACTS.llm_args.fields
    )


def test_the_metrics_are_exactly_the_facts_names() -> None:
    metrics = server.Metrics(FACTS.metric_names)
    families = {family.name for family in metrics.registry.collect()}
    assert families == {name.removesuffix("_total") for name in FACTS.metric_names}


def test_every_source_is_named_with_its_provenance() -> None:
    files = FACTS.sources["files"]
    assert set(files) == {
        extract_facts.SERVE,
        extract_facts.BUILDER,
        extract_facts.LOGGER,
        extract_facts.LLM_ARGS,
        extract_facts.COLLECTOR,
    }
    for path, where in files.items():
        assert ("commit" in where or "index_id" in where) and where["dated"], path
    assert FACTS.sources["tag_read"] is False and FACTS.sources["why_not_the_tag"]


SERVE_PY = """
@click.command("serve")
@click.argument("model", type=str)
@click.option("--host", type=str, default="localhost")
@click.option("--backend", type=ChoiceWithAlias(["pytorch", "tensorrt"], {"trt": "tensorrt"}), default=None)
@click.option("--log_level", type=click.Choice(severity_map.keys()), default="info")
@click.option("--max_batch_size", type=int, default=BuildConfig.model_fields["max_batch_size"].default)
@click.option("--tensor_parallel_size", "--tp_size", type=int, default=1)
@click.option("--trust_remote_code", is_flag=True, default=False)
@click.option("--config", "--extra_llm_api_options", "extra_llm_api_options", type=str, default=None)
@click.option("--tool_parser", type=click.Choice(ToolParserFactory.parsers.keys()), default=None)
def serve(**kwargs):
    pass

main = DefaultGroup(commands={"serve": serve, "grpc": grpc})
"""
LLM_ARGS_PY = """
class DynamicBatchConfig(StrictBaseModel, PybindMirror):
    window: int = 1

class SchedulerConfig(StrictBaseModel, PybindMirror):
    policy: CapacitySchedulerPolicy = 1
    dynamic_batch_config: Optional[DynamicBatchConfig] = None

class BaseLlmArgs(StrictBaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")
    model: str = Field(description="m")
    mpi_session: Optional[object] = Field(default=None, alias="_mpi_session")
    scheduler_config: SchedulerConfig = Field(default_factory=SchedulerConfig)
    backend: Optional[str] = None
    _private: int = PrivateAttr(default=0)

class TorchLlmArgs(BaseLlmArgs):
    speculative_config: Optional[SpeculativeConfig] = None
    backend: Literal["pytorch"] = "pytorch"

def update_llm_args_with_extra_dict(llm_args, llm_args_dict):
    field_mapping = {"kv_cache_config": KvCacheConfig, "build_config": BuildConfig}
"""


def _tree(root: Path) -> Path:
    files = {
        extract_facts.SERVE: SERVE_PY,
        extract_facts.BUILDER: "@dataclass\nclass BuildConfig:\n    max_batch_size: int = 2048\n",
        extract_facts.LOGGER: "severity_map = {'error': [1], 'info': [2]}\n",
        extract_facts.LLM_ARGS: LLM_ARGS_PY,
        extract_facts.COLLECTOR: "class C:\n    def __init__(self):\n        self.metric_prefix = 'p_'\n"
        "        self.a = Counter(name=self.metric_prefix + 'done_total')\n",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def test_the_script_reads_options_fields_and_metrics_from_sources(tmp_path: Path) -> None:
    sources = tmp_path / "sources.json"
    sources.write_text('{"files": {}}')
    output = tmp_path / "facts.json"
    argv = ["--source-root", str(_tree(tmp_path / "src")), "--sources", str(sources), "--output", str(output)]
    assert extract_facts.main(argv) == 0
    facts = json.loads(output.read_text())
    options = {o["dest"]: o for o in facts["cli"]["options"]}
    assert list(options) == [
        "host",
        "backend",
        "log_level",
        "max_batch_size",
        "tensor_parallel_size",
        "trust_remote_code",
        "extra_llm_api_options",
        "tool_parser",
    ]
    assert options["backend"]["aliases"] == {"trt": "tensorrt"}
    assert options["log_level"]["choices"] == ["error", "info"]
    assert options["max_batch_size"]["default"] == 2048
    assert options["tensor_parallel_size"]["names"] == ["--tensor_parallel_size", "--tp_size"]
    assert options["trust_remote_code"] == {**options["trust_remote_code"], "is_flag": True, "type": "bool"}
    assert options["tool_parser"]["choices"] is None
    assert facts["cli"]["subcommands"] == ["serve", "grpc"]
    llm = facts["llm_args"]
    assert llm["fields"] == {
        "backend": None,
        "model": None,
        "mpi_session": None,
        "scheduler_config": "SchedulerConfig",
        "speculative_config": None,
    }
    assert llm["classes"] == {
        "SchedulerConfig": {"dynamic_batch_config": "DynamicBatchConfig", "policy": None},
        "DynamicBatchConfig": {"window": None},
    }
    assert llm["aliases"] == {"TorchLlmArgs": {"mpi_session": "_mpi_session"}}
    assert llm["extra_forbidden"] is True
    assert llm["built_by_class_from_yaml"] == ["kv_cache_config", "build_config"]
    assert facts["prometheus"]["names"] == ["p_done_total"]


def test_the_script_says_which_source_is_missing(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src")
    (root / extract_facts.COLLECTOR).unlink()
    sources = tmp_path / "sources.json"
    sources.write_text("{}")
    argv = ["--source-root", str(root), "--sources", str(sources), "--output", str(tmp_path / "out.json")]
    assert extract_facts.main(argv) == 1
    assert not (tmp_path / "out.json").exists()


TYPED_LLM_ARGS_PY = """
class Policy(StrEnum, metaclass=PybindMirrorEnumMeta):
    FAST = "FAST"
    SLOW = "SLOW"

Backend = Literal['a', 'b']

class CacheConfig(StrictBaseModel):
    fraction: Optional[float] = Field(default=0.9, ge=0, le=1)
    windows: Optional[List[PositiveInt]] = Field(default=None, min_length=1)
    bytes: NonNegativeInt = Field(default=0)
    wait: NonNegativeFloat = 0
    policy: Policy = Field(default=Policy.FAST)
    backends: List[Backend] = Field(default_factory=lambda: ['a'])
    module: str = Field(...)
    env: Optional[Dict[str, str]] = None
    loader: Optional[Union[object, str]] = None

    @model_validator(mode='after')
    def validate_cache(self) -> 'CacheConfig':
        if self.bytes > 8:
            raise ValueError(f"bytes {self.bytes} too large")
        return self

class BaseLlmArgs(StrictBaseModel):
    cache: CacheConfig = Field(default_factory=CacheConfig)
    flag: bool = Field(default=False)

    @field_validator("flag", mode="before")
    @classmethod
    def keep_flag(cls, v):
        return v

class TorchLlmArgs(BaseLlmArgs):
    lora: Optional[LoraConfig] = None

def update_llm_args_with_extra_dict(llm_args, llm_args_dict):
    field_mapping = {"cache": CacheConfig}
"""


def test_the_script_reads_types_bounds_enums_and_validators() -> None:
    llm = extract_facts.extract_llm_args(TYPED_LLM_ARGS_PY, None)
    cache = llm["types"]["CacheConfig"]
    assert cache["fraction"] == {
        "type": {"type": "optional", "of": {"type": "float"}},
        "bounds": {"ge": 0, "le": 1},
        "default": 0.9,
    }
    assert cache["windows"]["type"] == {
        "type": "optional",
        "of": {"type": "list", "of": {"type": "int", "gt": 0}},
    }
    assert cache["windows"]["bounds"] == {"min_length": 1}
    assert cache["bytes"]["type"] == {"type": "int", "ge": 0}
    assert cache["wait"] == {"type": {"type": "float", "ge": 0}, "default": 0}
    assert cache["policy"] == {"type": {"type": "enum", "enum": "Policy"}, "default_source": "Policy.FAST"}
    assert cache["backends"]["type"] == {"type": "list", "of": {"type": "literal", "values": ["a", "b"]}}
    assert cache["module"] == {"type": {"type": "str"}, "required": True}
    assert cache["env"]["type"] == {
        "type": "optional",
        "of": {"type": "dict", "key": {"type": "str"}, "value": {"type": "str"}},
    }
    assert cache["loader"]["type"] == {
        "type": "optional",
        "of": {"type": "union", "of": [{"type": "any"}, {"type": "str"}]},
    }
    top = llm["types"]["TorchLlmArgs"]
    assert top["cache"]["type"] == {"type": "model", "class": "CacheConfig"}
    assert top["flag"] == {"type": {"type": "bool"}, "default": False}
    assert top["lora"]["type"] == {"type": "optional", "of": {"type": "any", "name": "LoraConfig"}}
    assert llm["enums"] == {"Policy": {"base": "StrEnum", "members": {"FAST": "FAST", "SLOW": "SLOW"}}}
    assert llm["bases"] == {"TorchLlmArgs": ["BaseLlmArgs"]}
    (cache_rule,) = llm["validators"]["CacheConfig"]
    assert cache_rule["method"] == "validate_cache" and cache_rule["mode"] == "after"
    assert cache_rule["raises"] == [{"exception": "ValueError", "message": "bytes {self.bytes} too large"}]
    assert (
        cache_rule["line"]
        == TYPED_LLM_ARGS_PY.splitlines().index("    def validate_cache(self) -> 'CacheConfig':") + 1
    )
    (flag_rule,) = llm["validators"]["BaseLlmArgs"]
    assert (flag_rule["decorator"], flag_rule["mode"], flag_rule["fields"]) == (
        "field_validator",
        "before",
        ["flag"],
    )


def test_the_facts_carry_the_real_bounds_and_enums() -> None:
    llm = FACTS.llm_args
    fraction = llm.types["KvCacheConfig"]["free_gpu_memory_fraction"]
    assert fraction["bounds"] == {"ge": 0, "le": 1}
    assert llm.types["TorchLlmArgs"]["enable_chunked_prefill"]["type"] == {"type": "bool"}
    assert llm.types["SchedulerConfig"]["capacity_scheduler_policy"]["type"] == {
        "type": "enum",
        "enum": "CapacitySchedulerPolicy",
    }
    assert list(llm.enums["CapacitySchedulerPolicy"]["members"]) == [
        "MAX_UTILIZATION",
        "GUARANTEED_NO_EVICT",
        "STATIC_BATCH",
    ]
    assert llm.types["CudaGraphConfig"]["max_batch_size"]["type"] == {"type": "int", "ge": 0}
    assert set(llm.types) == {llm.class_name, *llm.classes}


def test_every_validator_is_checked_or_said_why_not_in_the_real_words() -> None:
    llm = FACTS.llm_args
    listed = {(owner, v["method"]): v for owner, found in llm.validators.items() for v in found}
    assert set(rules.CHECKED) | set(rules.NOT_CHECKED) == set(listed)
    assert not set(rules.CHECKED) & set(rules.NOT_CHECKED)
    for key, rule in rules.CHECKED.items():
        assert rule.mode == listed[key]["mode"], key
        assert list(rule.fields) == listed[key]["fields"], key
        # Every message the double raises is one the real validator raises (the f-string parts aside).
        real = {_shape(r["message"]) for r in listed[key]["raises"]}
        tree = ast.parse(textwrap.dedent(inspect.getsource(rule.check)))
        raised = [
            extract_facts._message(node.exc.args[0])
            for node in ast.walk(tree)
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args
        ]
        assert raised, key
        for message in raised:
            assert _shape(message) in real, (key, message)
    assert list(rules.LOAD_FORMATS) == list(llm.enums["LoadFormat"]["members"])


def _shape(message: str) -> str:
    """A message with its f-string parts blanked: the words, whatever the variables are called."""
    return re.sub(r"\{[^}]*\}", "{}", message)
