"""Parse rendered `config.pbtxt` files with Triton's own ModelConfig protobuf and check the ensemble wiring.

Triton only finds a miswired ensemble when it loads the repository; this check finds the same mistakes
offline: a step mapping a tensor its model does not declare, a tensor consumed before it is produced,
data types or shapes that disagree between producer and consumer, required inputs left unmapped, and
ensemble inputs or outputs nobody uses or produces.

Triton's `model_config.proto` comes as its compiled descriptor, `model_config.binpb` beside this module,
which `make generate` writes from the one tritonclient ships (a unit test fails when they drift). So
the check needs only the protobuf runtime, not the Triton client and its gRPC stack. Pure: no I/O beyond
reading that package file once.

protobuf's text parser is pure Python and was four fifths of planning a new spec, though two specs'
repositories differ in a few lines. A config is parsed statement by statement (a top-level field starts
at the beginning of a line, as the templates write them), each statement's parse remembered; a text
laid out otherwise, or with any problem, is parsed whole by protobuf for its verdict and message.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, TypeAlias

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

MODEL_CONFIG_DESCRIPTOR = "model_config.binpb"
MODEL_CONFIG_MESSAGE = "inference.ModelConfig"

# Messages built from a descriptor at run time have no static types.
ModelConfig: TypeAlias = Any


_POOL_LOCK = threading.Lock()


@cache
def _made_pool() -> descriptor_pool.DescriptorPool:
    serialized = resources.files(__package__).joinpath(MODEL_CONFIG_DESCRIPTOR).read_bytes()
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(serialized))
    return pool


def _pool() -> descriptor_pool.DescriptorPool:
    # One pool for every thread: the first plans run on several workers at once, and messages of two
    # pools' classes cannot be merged (the remembered statements are merged into each config).
    with _POOL_LOCK:
        return _made_pool()


def model_config_class() -> type[Any]:
    """The `inference.ModelConfig` message class of Triton's model_config.proto."""
    return message_factory.GetMessageClass(_pool().FindMessageTypeByName(MODEL_CONFIG_MESSAGE))


def data_type_name(value: int) -> str:
    """`TYPE_FP16` and friends, from the enum value a parsed config holds."""
    name: str = _pool().FindEnumTypeByName("inference.DataType").values_by_number[value].name
    return name


class RepositoryError(Exception):
    """A config does not parse, or the ensemble wiring is inconsistent."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


# Where a top-level statement starts, and the field it sets.
_STATEMENT_START = re.compile(r"^(?=[A-Za-z_])", re.MULTILINE)
_FIELD_NAME = re.compile(r"[A-Za-z_]\w*")
# Parsed statements by their text: the specs in use share most of theirs. A bound, not a policy.
_STATEMENTS_HELD = 8192
_statements: dict[str, ModelConfig | None] = {}
_UNSEEN = object()


class _NotByStatementError(Exception):
    """The text is not laid out one top-level field per statement, or a statement does not parse."""


def _statement(text: str) -> ModelConfig:
    parsed = _statements.get(text, _UNSEEN)  # one look-up: another worker may clear it meanwhile
    if parsed is _UNSEEN:
        parsed = model_config_class()()
        try:
            text_format.Parse(text, parsed)
        except text_format.ParseError:
            parsed = None
        if len(_statements) >= _STATEMENTS_HELD:
            _statements.clear()
        _statements[text] = parsed
    if parsed is None:
        raise _NotByStatementError
    return parsed


def _parse_by_statement(text: str) -> ModelConfig:
    """The config of `text`, merged from its statements' remembered parses.

    What a whole parse refuses across statements (a singular field or a oneof set twice) is checked
    by the field each statement starts with; a statement setting any other field is not taken apart.
    """
    fields = model_config_class().DESCRIPTOR.fields_by_name
    config = model_config_class()()
    seen: set[str] = set()
    for statement in _STATEMENT_START.split(text):
        start = _FIELD_NAME.match(statement)
        if start is None:  # comments and blank lines before the first field
            if statement.strip() and not all(
                not line.strip() or line.lstrip().startswith("#") for line in statement.splitlines()
            ):
                raise _NotByStatementError
            continue
        field = fields.get(start.group())
        if field is None:
            raise _NotByStatementError
        parsed = _statement(statement)
        if any(other.name != field.name for other, _ in parsed.ListFields()):
            raise _NotByStatementError
        oneof = field.containing_oneof
        exclusive = {member.name for member in oneof.fields} if oneof is not None else set()
        if not field.is_repeated and (field.name in seen or exclusive & seen):
            raise _NotByStatementError
        seen.add(field.name)
        config.MergeFrom(parsed)
    return config


def parse_config(name: str, text: str) -> ModelConfig:
    """Parse one `config.pbtxt` text.

    Raises:
        RepositoryError: if the text is not a valid inference.ModelConfig.
    """
    try:
        return _parse_by_statement(text)
    except _NotByStatementError:
        pass  # protobuf parses it whole: its verdict, and its message with the line and column
    try:
        return text_format.Parse(text, model_config_class()())
    except text_format.ParseError as error:
        raise RepositoryError([f"{name}/config.pbtxt: {error}"]) from None


def parse_repository(configs: Mapping[str, str]) -> dict[str, ModelConfig]:
    """Parse every config of a repository (model name to text)."""
    parsed, problems = {}, []
    for name, text in configs.items():
        try:
            parsed[name] = parse_config(name, text)
        except RepositoryError as error:
            problems += error.problems
            continue
        if parsed[name].name != name:
            problems.append(f"{name}/config.pbtxt: declares name {parsed[name].name!r}")
    if problems:
        raise RepositoryError(problems)
    return parsed


@dataclass(frozen=True)
class Tensor:
    """What one side of an ensemble edge declares about a tensor."""

    owner: str
    data_type: int
    dims: tuple[int, ...]

    def describe(self) -> str:
        """Human-readable type and shape."""
        type_name = data_type_name(self.data_type)
        return f"{type_name}{list(self.dims)} ({self.owner})"

    def fits(self, other: Tensor) -> bool:
        """Same data type and shape, where -1 (variable) matches any size."""
        return (
            self.data_type == other.data_type
            and len(self.dims) == len(other.dims)
            and all(x == y or -1 in (x, y) for x, y in zip(self.dims, other.dims, strict=True))
        )


def _io(config: ModelConfig, kind: str) -> dict[str, Tensor]:
    return {
        t.name: Tensor(f"{config.name}.{t.name}", t.data_type, tuple(t.dims)) for t in getattr(config, kind)
    }


def _optional_inputs(config: ModelConfig) -> set[str]:
    return {t.name for t in config.input if t.optional}


def check_ensemble(models: Mapping[str, ModelConfig], ensemble_name: str = "ensemble") -> list[str]:
    """Return every inconsistency of the ensemble's wiring (empty when it is sound)."""
    ensemble = models[ensemble_name]
    problems: list[str] = []
    available = _io(ensemble, "input")  # ensemble tensors produced so far, by name
    consumed: set[str] = set()
    for step in ensemble.ensemble_scheduling.step:
        where = f"{ensemble_name} step {step.model_name}"
        model = models.get(step.model_name)
        if model is None:
            problems.append(f"{where}: model {step.model_name!r} is not in the repository")
            continue
        inputs, outputs = _io(model, "input"), _io(model, "output")
        for model_tensor, ensemble_tensor in step.input_map.items():
            consumer = inputs.get(model_tensor)
            if consumer is None:
                problems.append(f"{where}: input_map key {model_tensor!r} is not an input of {model.name}")
                continue
            producer = available.get(ensemble_tensor)
            consumed.add(ensemble_tensor)
            if producer is None:
                problems.append(f"{where}: {ensemble_tensor!r} is used before any step produces it")
            elif not producer.fits(consumer):
                problems.append(
                    f"{where}: {ensemble_tensor!r} is {producer.describe()} but {model_tensor!r} expects "
                    f"{consumer.describe()}"
                )
        for required in sorted(set(inputs) - _optional_inputs(model) - set(step.input_map)):
            problems.append(f"{where}: required input {required!r} of {model.name} is not mapped")
        for model_tensor, ensemble_tensor in step.output_map.items():
            produced = outputs.get(model_tensor)
            if produced is None:
                problems.append(f"{where}: output_map key {model_tensor!r} is not an output of {model.name}")
                continue
            if ensemble_tensor in available:
                problems.append(f"{where}: {ensemble_tensor!r} is produced twice")
            available[ensemble_tensor] = produced
    for name, declared in _io(ensemble, "output").items():
        produced = available.get(name)
        if produced is None:
            problems.append(f"{ensemble_name}: output {name!r} is never produced")
        elif not produced.fits(declared):
            problems.append(
                f"{ensemble_name}: output {name!r} is declared {declared.describe()} "
                f"but produced as {produced.describe()}"
            )
    for name in sorted(set(_io(ensemble, "input")) - consumed):
        problems.append(f"{ensemble_name}: input {name!r} is never used by any step")
    return problems


def check_repository(configs: Mapping[str, str]) -> dict[str, ModelConfig]:
    """Parse a rendered repository and check every ensemble in it.

    Raises:
        RepositoryError: listing every problem found.
    """
    models = parse_repository(configs)
    problems = []
    for name, config in models.items():
        if config.platform == "ensemble":
            problems += check_ensemble(models, name)
    if problems:
        raise RepositoryError(problems)
    return models
