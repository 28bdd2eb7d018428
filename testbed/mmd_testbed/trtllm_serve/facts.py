"""The facts of the real `trtllm-serve` the double honours, loaded from the generated data file.

`trtllm_serve_facts.json` is written by tools/trtllm_serve/extract_facts.py from TensorRT-LLM's sources and
committed; this module only reads it. Imports the standard library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

DATA_FILE = "trtllm_serve_facts.json"
PINNED_VERSION = "1.2.1"


@dataclass(frozen=True)
class Option:
    """One option of the `serve` command, as click declares it in serve.py."""

    names: tuple[str, ...]
    dest: str
    kind: str  # int | float | str | bool | choice | path
    default: Any
    is_flag: bool
    multiple: bool
    choices: tuple[str, ...] | None  # None with kind `choice`: a registry serve.py does not list
    aliases: Mapping[str, str]
    must_exist: bool


@dataclass(frozen=True)
class LlmArgsFacts:
    """The LlmArgs class the `--config` YAML is applied onto and the strict classes nested in it."""

    class_name: str
    extra_forbidden: bool
    # field name -> the strict class its value is validated as (None: not checked deeper)
    fields: Mapping[str, str | None]
    classes: Mapping[str, Mapping[str, str | None]]
    aliases: Mapping[str, Mapping[str, str]]
    # YAML keys serve.py turns into their class before the LLM sees them (errors name that class)
    built_by_class_from_yaml: tuple[str, ...]
    # YAML keys serve.py removes before the PyTorch LLM validates the args
    popped_for_pytorch: tuple[str, ...]
    # class -> field -> {"type": <type description>, "bounds", "default" | "default_source" | "required"}
    types: Mapping[str, Mapping[str, Mapping[str, Any]]]
    # enum class -> {"base": "StrEnum" | "Enum" | ..., "members": {name: value}}
    enums: Mapping[str, Mapping[str, Any]]
    # class -> the classes of llm_args.py it derives from, outermost first
    bases: Mapping[str, tuple[str, ...]]
    # class -> its pydantic validators: method, decorator, mode, fields, line, raises
    validators: Mapping[str, tuple[Mapping[str, Any], ...]]


@dataclass(frozen=True)
class Facts:
    """Everything the double takes from the real sources."""

    sources: Mapping[str, Any]
    subcommands: tuple[str, ...]
    arguments: tuple[str, ...]
    options: tuple[Option, ...]
    log_levels: tuple[str, ...]
    llm_args: LlmArgsFacts
    metric_names: tuple[str, ...]


def _option(raw: Mapping[str, Any]) -> Option:
    choices = raw.get("choices")
    return Option(
        names=tuple(raw["names"]),
        dest=raw["dest"],
        kind=raw["type"],
        default=raw["default"],
        is_flag=raw["is_flag"],
        multiple=raw["multiple"],
        choices=tuple(choices) if choices is not None else None,
        aliases=dict(raw.get("aliases") or {}),
        must_exist=bool(raw.get("exists", False)),
    )


def parse(raw: Mapping[str, Any]) -> Facts:
    """Facts from the data file's JSON object."""
    llm = raw["llm_args"]
    return Facts(
        sources=raw["sources"],
        subcommands=tuple(raw["cli"]["subcommands"]),
        arguments=tuple(a["name"] for a in raw["cli"]["arguments"]),
        options=tuple(_option(o) for o in raw["cli"]["options"]),
        log_levels=tuple(raw["log_levels"]),
        llm_args=LlmArgsFacts(
            class_name=llm["class"],
            extra_forbidden=llm["extra_forbidden"],
            fields=dict(llm["fields"]),
            classes={name: dict(fields) for name, fields in llm["classes"].items()},
            aliases={name: dict(aliases) for name, aliases in llm["aliases"].items()},
            built_by_class_from_yaml=tuple(llm["built_by_class_from_yaml"]),
            popped_for_pytorch=tuple(llm["popped_for_pytorch"]),
            types=llm["types"],
            enums=llm["enums"],
            bases={name: tuple(bases) for name, bases in llm["bases"].items()},
            validators={name: tuple(found) for name, found in llm["validators"].items()},
        ),
        metric_names=tuple(raw["prometheus"]["names"]),
    )


def load() -> Facts:
    """The committed facts."""
    text = resources.files(__package__).joinpath(DATA_FILE).read_text()
    return parse(json.loads(text))
