"""The `--config` / `--extra_llm_api_options` YAML, checked against the real LlmArgs field names.

serve.py loads the YAML with `yaml.safe_load`, builds the fields listed in `update_llm_args_with_extra_dict`'s
field mapping into their classes (`KvCacheConfig(**value)`: an unknown key there fails naming that class),
drops `build_config` for the PyTorch backend and hands the rest to `TorchLlmArgs`, a pydantic model whose base
forbids extra keys, as do the nested config classes (they derive from `StrictBaseModel`). The double builds
pydantic models with the same class names and field names from the facts (values are not type-checked: any
value is accepted under a known name), so an unknown key fails with pydantic's own message, e.g.
`1 validation error for TorchLlmArgs` / `scheduler_config.foo` / `Extra inputs are not permitted`.
Imports pydantic and PyYAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, create_model

from mmd_testbed.trtllm_serve.facts import LlmArgsFacts


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

    def model(self, class_name: str) -> type[BaseModel]:
        """The model of `class_name` (the args class or a nested one)."""
        if class_name in self._built:
            return self._built[class_name]
        fields = self.facts.fields if class_name == self.facts.class_name else self.facts.classes[class_name]
        aliases = self.facts.aliases.get(class_name, {})
        definitions: dict[str, Any] = {}
        for name, nested in fields.items():
            annotation: Any = Any if nested is None else (self.model(nested) | None)
            definitions[name] = (annotation, Field(default=None, alias=aliases.get(name)))
        built: type[BaseModel] = create_model(class_name, __config__=self._config, **definitions)
        self._built[class_name] = built
        return built


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
