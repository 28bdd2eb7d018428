"""The `--config` / `--extra_llm_api_options` YAML, checked as the real TorchLlmArgs checks it.

serve.py loads the YAML with `yaml.safe_load`, builds the fields listed in `update_llm_args_with_extra_dict`'s
field mapping into their classes (`KvCacheConfig(**value)`: an unknown key there fails naming that class),
drops `build_config` for the PyTorch backend and hands the rest to `TorchLlmArgs`, a pydantic model whose base
forbids extra keys, as do the nested config classes (they derive from `StrictBaseModel`). The double builds
pydantic models with the same class names, field names, types, bounds and enum members from the facts, and
the cross-field rules of `rules`, so a bad key or value fails with pydantic's own message, e.g.
`1 validation error for TorchLlmArgs` / `scheduler_config.foo` / `Extra inputs are not permitted`, or
`1 validation error for KvCacheConfig` / `free_gpu_memory_fraction` / `Input should be less than or equal
to 1`. Types the facts cannot resolve (classes of other modules, the speculative and sparse attention
unions) take any value. Imports pydantic, PyYAML and the rules.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, create_model

from mmd_testbed.trtllm_serve import rules
from mmd_testbed.trtllm_serve.facts import LlmArgsFacts

SCALARS: dict[str, Any] = {"bool": bool, "int": int, "float": float, "str": str, "path": Path}


class ConfigError(Exception):
    """The YAML cannot be applied; the message is what the real server would say."""


class ArgsModels:
    """Pydantic models named and shaped like TorchLlmArgs and its strict nested config classes."""

    def __init__(self, facts: LlmArgsFacts) -> None:
        self.facts = facts
        self._config = ConfigDict(
            extra="forbid" if facts.extra_forbidden else "allow",
            protected_namespaces=(),
            populate_by_name=False,
        )
        self._built: dict[str, type[BaseModel]] = {}
        self._enums: dict[str, type[enum.Enum]] = {}

    def model(self, class_name: str) -> type[BaseModel]:
        """The model of `class_name` (the args class or a nested one)."""
        if class_name in self._built:
            return self._built[class_name]
        facts = self.facts
        aliases = facts.aliases.get(class_name, {})
        top = class_name == facts.class_name
        definitions: dict[str, Any] = {}
        for name, described in facts.types[class_name].items():
            annotation = self.annotation(described["type"])
            bounds = described.get("bounds", {})
            # serve.py supplies the args class' required `model` from the command line.
            required = described.get("required", False) and not top
            # Defaults are not validated (as in pydantic), so one that is no literal stands as None.
            default = ... if required else described.get("default")
            definitions[name] = (annotation, Field(default, alias=aliases.get(name), **bounds))
        methods = [
            v["method"]
            for owner in (*facts.bases.get(class_name, ()), class_name)
            for v in facts.validators.get(owner, ())
        ]
        built: type[BaseModel] = create_model(
            class_name,
            __config__=self._config,
            __validators__=rules.validators_of(class_name, methods)
            | {
                f"{owner}.{method}": validator
                for owner in facts.bases.get(class_name, ())
                for method, validator in rules.validators_of(owner, methods).items()
            },
            **definitions,
        )
        self._built[class_name] = built
        return built

    def annotation(self, described: Mapping[str, Any]) -> Any:
        """The Python type of a type description of the facts."""
        kind = described["type"]
        bounds = {k: described[k] for k in ("gt", "ge", "lt", "le") if k in described}
        if kind in SCALARS:
            scalar = SCALARS[kind]
            return Annotated[scalar, Field(**bounds)] if bounds else scalar
        if kind == "optional":
            return self.annotation(described["of"]) | None
        if kind == "union":
            return Union[tuple(self.annotation(member) for member in described["of"])]  # noqa: UP007
        if kind == "literal":
            return Literal[tuple(described["values"])]
        if kind == "list":
            return list[self.annotation(described["of"])]  # type: ignore[misc]
        if kind == "set":
            return set[self.annotation(described["of"])]  # type: ignore[misc]
        if kind == "dict":
            return dict[self.annotation(described["key"]), self.annotation(described["value"])]  # type: ignore[misc]
        if kind == "enum":
            return self.enum(described["enum"])
        if kind == "model":
            return self.model(described["class"])
        if kind == "none":
            return None
        return Any

    def enum(self, name: str) -> type[enum.Enum]:
        """An enum with the real one's name and members (a StrEnum's values are strings)."""
        if name not in self._enums:
            described = self.facts.enums[name]
            members = dict(described["members"])
            # The functional API: the members come from the facts, not from a class body.
            mixin = str if described["base"] == "StrEnum" else None
            built: type[enum.Enum] = enum.Enum(name, members, type=mixin)  # type: ignore[misc]
            self._enums[name] = built
        return self._enums[name]


def load_config(path: str, models: ArgsModels) -> dict[str, Any]:
    """The YAML at `path` as serve.py would apply it, or ConfigError with the real error text."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError(f"{type(error).__name__}: {error}") from error
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{type(error).__name__}: {error}") from error
    if values is None:
        values = {}
    if not isinstance(values, dict):
        # serve.py merges it with `|` into a dict: anything else is a TypeError there.
        raise ConfigError(
            f"TypeError: the --config YAML must be a mapping of LlmArgs fields, not {type(values).__name__}"
        )
    facts = models.facts
    try:
        for key in facts.built_by_class_from_yaml:
            nested = facts.fields.get(key)
            if key in values and nested is not None and isinstance(values[key], dict):
                models.model(nested).model_validate(values[key])
        checked = {k: v for k, v in values.items() if k not in facts.popped_for_pytorch}
        models.model(facts.class_name).model_validate(checked)
    except ValueError as error:  # pydantic's ValidationError
        raise ConfigError(f"{type(error).__name__}: {error}") from error
    return values
