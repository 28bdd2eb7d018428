"""Regenerate the trtllm-serve double's data file from TensorRT-LLM sources.

Reads, with `ast` (nothing is imported or run):
- `tensorrt_llm/commands/serve.py`: the `serve` command's click argument and options (names, type, default,
  flag, multiple, choices) and the sub-commands of the `trtllm-serve` group;
- `tensorrt_llm/builder.py`: the BuildConfig defaults `serve` uses as option defaults;
- `tensorrt_llm/logger.py`: the `--log_level` choices (`severity_map`);
- `tensorrt_llm/llmapi/llm_args.py` (and `llm_utils.py` where a version keeps it there): the fields of
  TorchLlmArgs and of every strict nested config class they name, with each field's type (bool, int,
  float, str, Optional, List/Set/Dict, Literal members, enum members, pydantic's constrained numbers) and
  its `Field` bounds and default; the enum classes the file defines; the pydantic validators of those
  classes (method, mode, line, the messages they raise); whether BaseLlmArgs forbids extra keys, and the
  fields `update_llm_args_with_extra_dict` builds from the YAML by class;
- `tensorrt_llm/metrics/collector.py`: the Prometheus metric names.

Two ways to give the sources:

    tools/trtllm_serve/extract_facts.py --git-dir TensorRT-LLM/.git --rev v1.2.1
    tools/trtllm_serve/extract_facts.py --source-root DIR --sources tools/trtllm_serve/sources.json

The first reads each file at the tag with `git show` and records the commit; the second reads files laid out
like the repository under DIR and copies their provenance from the sources file (see
docs/development/trtllm-serve-double.md for what was read, from where, and why not the tag). The output
is the JSON file the double loads (default: its package's data file); nothing else is written.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUTPUT = REPO_ROOT / "testbed/mmd_testbed/trtllm_serve/trtllm_serve_facts.json"
SERVE = "tensorrt_llm/commands/serve.py"
BUILDER = "tensorrt_llm/builder.py"
LOGGER = "tensorrt_llm/logger.py"
LLM_ARGS = "tensorrt_llm/llmapi/llm_args.py"
LLM_UTILS = "tensorrt_llm/llmapi/llm_utils.py"
COLLECTOR = "tensorrt_llm/metrics/collector.py"
REQUIRED = (SERVE, BUILDER, LOGGER, LLM_ARGS, COLLECTOR)
# The pydantic base whose subclasses refuse unknown keys (llmapi/utils.py); the roots of the args classes.
STRICT_ROOT = "StrictBaseModel"
ARGS_CLASS = "TorchLlmArgs"
BASE_ARGS_CLASS = "BaseLlmArgs"
# Keys `serve` takes out of the merged args before the PyTorch LLM validates them (launch_server).
POPPED_FOR_PYTORCH = ("build_config",)

Reader = Callable[[str], str | None]


class ExtractionError(Exception):
    """A source does not have the shape this script reads."""


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _call_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return ast.unparse(node.func)
    return ast.unparse(node)


def _strings(nodes: list[ast.expr]) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


# --- serve.py ------------------------------------------------------------------------------------------


def _resolve_default(node: ast.expr, build_defaults: dict[str, Any]) -> Any:
    """A literal, or `BuildConfig.model_fields["x"].default` / `BuildConfig.x` resolved from builder.py."""
    text = ast.unparse(node)
    if text.startswith("BuildConfig."):
        subscripts = [
            n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
        ]
        name = subscripts[0] if subscripts else text.split(".")[1]
        if name not in build_defaults:
            raise ExtractionError(f"serve.py: default {text} names no BuildConfig field in builder.py")
        return build_defaults[name]
    return _literal(node)


def _option_type(node: ast.expr | None, severity: list[str]) -> dict[str, Any]:
    if node is None:
        return {"type": "str"}
    name = _call_name(node)
    if name in ("int", "str", "float"):
        return {"type": name}
    if isinstance(node, ast.Call) and name == "click.Path":
        exists = any(k.arg == "exists" and _literal(k.value) is True for k in node.keywords)
        return {"type": "path", "exists": exists}
    if isinstance(node, ast.Call) and name == "ChoiceWithAlias":
        choices, aliases = (_literal(a) for a in node.args[:2])
        return {"type": "choice", "choices": choices, "aliases": aliases}
    if isinstance(node, ast.Call) and name == "click.Choice":
        source = ast.unparse(node.args[0])
        if source == "severity_map.keys()":
            return {"type": "choice", "choices": severity}
        literal = _literal(node.args[0])
        if isinstance(literal, list):
            return {"type": "choice", "choices": literal}
        # Registries filled at import time (reasoning and tool parsers): the names are not in serve.py.
        return {"type": "choice", "choices": None, "choices_source": source}
    raise ExtractionError(f"serve.py: option type {ast.unparse(node)} is not one this script reads")


def _serve_command(tree: ast.Module) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "serve":
            return node
    raise ExtractionError("serve.py: no `def serve`")


def extract_cli(serve_source: str, build_defaults: dict[str, Any], severity: list[str]) -> dict[str, Any]:
    """The `serve` command's parameters in declaration order, and the group's sub-commands."""
    tree = ast.parse(serve_source)
    arguments: list[dict[str, Any]] = []
    options: list[dict[str, Any]] = []
    for decorator in _serve_command(tree).decorator_list:  # source order: the order --help lists them
        if not isinstance(decorator, ast.Call):
            continue
        kind = _call_name(decorator)
        names = _strings(decorator.args)
        keywords = {k.arg: k.value for k in decorator.keywords if k.arg}
        if kind == "click.argument":
            arguments.append({"name": names[0], **_option_type(keywords.get("type"), severity)})
        elif kind == "click.option":
            flags = [n for n in names if n.startswith("-")]
            dests = [n for n in names if not n.startswith("-")]
            is_flag = _literal(keywords["is_flag"]) is True if "is_flag" in keywords else False
            option: dict[str, Any] = {
                "names": flags,
                "dest": dests[0] if dests else flags[0].lstrip("-"),
                "is_flag": is_flag,
                "multiple": _literal(keywords["multiple"]) is True if "multiple" in keywords else False,
                "default": _resolve_default(keywords["default"], build_defaults)
                if "default" in keywords
                else None,
            }
            option.update({"type": "bool"} if is_flag else _option_type(keywords.get("type"), severity))
            options.append(option)
    return {
        "command": "serve",
        "subcommands": _group_commands(tree),
        "arguments": arguments,
        "options": options,
    }


def _group_commands(tree: ast.Module) -> list[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) == "DefaultGroup":
            for keyword in node.keywords:
                if keyword.arg == "commands" and isinstance(keyword.value, ast.Dict):
                    return _strings([k for k in keyword.value.keys if k is not None])
    raise ExtractionError("serve.py: no `DefaultGroup(commands={...})`")


# --- builder.py / logger.py ----------------------------------------------------------------------------


def extract_build_defaults(builder_source: str) -> dict[str, Any]:
    """BuildConfig's field defaults (a dataclass in some versions, a pydantic model in others)."""
    for node in ast.walk(ast.parse(builder_source)):
        if isinstance(node, ast.ClassDef) and node.name == "BuildConfig":
            defaults: dict[str, Any] = {}
            for statement in node.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    value = statement.value
                    if isinstance(value, ast.Call):  # Field(default=...)
                        value = next((k.value for k in value.keywords if k.arg == "default"), None)
                    defaults[statement.target.id] = _literal(value) if value is not None else None
            return defaults
    raise ExtractionError("builder.py: no `class BuildConfig`")


def extract_log_levels(logger_source: str) -> list[str]:
    """The keys of `severity_map`."""
    for node in ast.walk(ast.parse(logger_source)):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "severity_map" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            return _strings([k for k in node.value.keys if k is not None])
    raise ExtractionError("logger.py: no `severity_map = {...}`")


# --- llm_args.py ---------------------------------------------------------------------------------------


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _base_names(node: ast.ClassDef) -> list[str]:
    return [ast.unparse(b) for b in node.bases]


def _is_strict(name: str, classes: dict[str, ast.ClassDef]) -> bool:
    if name == STRICT_ROOT:
        return True
    node = classes.get(name)
    return node is not None and any(_is_strict(b, classes) for b in _base_names(node))


def _own_fields(node: ast.ClassDef) -> Iterator[tuple[str, ast.expr, str | None]]:
    """(name, annotation, alias) of each pydantic field the class body declares."""
    for statement in node.body:
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            continue
        name = statement.target.id
        if name.startswith("_") or ast.unparse(statement.annotation).startswith("ClassVar"):
            continue
        alias = None
        if isinstance(statement.value, ast.Call):
            alias = next(
                (_literal(k.value) for k in statement.value.keywords if k.arg == "alias"),
                None,
            )
        yield name, statement.annotation, alias


def _fields(name: str, classes: dict[str, ast.ClassDef]) -> dict[str, tuple[ast.expr, str | None]]:
    """Every field of a class, inherited ones first, a redeclaration replacing the inherited one."""
    node = classes[name]
    fields: dict[str, tuple[ast.expr, str | None]] = {}
    for base in _base_names(node):
        if base in classes:
            fields.update(_fields(base, classes))
    for field, annotation, alias in _own_fields(node):
        fields[field] = (annotation, alias)
    return fields


def _nested_class(annotation: ast.expr, classes: dict[str, ast.ClassDef]) -> str | None:
    """The one strict config class a field's annotation names, if exactly one."""
    names = {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)}
    strict = sorted(n for n in names if n in classes and _is_strict(n, classes))
    return strict[0] if len(strict) == 1 else None


def _forbids_extra(node: ast.ClassDef) -> bool:
    for statement in node.body:
        if (
            isinstance(statement, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "model_config" for t in statement.targets)
            and isinstance(statement.value, ast.Call)
        ):
            return any(k.arg == "extra" and _literal(k.value) == "forbid" for k in statement.value.keywords)
    return False


# pydantic's constrained numbers, as the bound each one adds.
CONSTRAINED_NUMBERS: dict[str, dict[str, Any]] = {
    "PositiveInt": {"type": "int", "gt": 0},
    "NonNegativeInt": {"type": "int", "ge": 0},
    "NegativeInt": {"type": "int", "lt": 0},
    "NonPositiveInt": {"type": "int", "le": 0},
    "PositiveFloat": {"type": "float", "gt": 0},
    "NonNegativeFloat": {"type": "float", "ge": 0},
    "NegativeFloat": {"type": "float", "lt": 0},
    "NonPositiveFloat": {"type": "float", "le": 0},
}
SCALARS = {"bool": "bool", "int": "int", "float": "float", "str": "str", "Path": "path"}
ANYTHING = ("object", "Any")
CONTAINERS = {"List": "list", "list": "list", "Set": "set", "set": "set", "Tuple": "list", "tuple": "list"}
# `Field` keywords that bound a value; pydantic checks them on the field's own type.
BOUNDS = ("gt", "ge", "lt", "le", "min_length", "max_length", "multiple_of")
ENUM_BASES = ("Enum", "StrEnum", "IntEnum")
VALIDATOR_DECORATORS = ("model_validator", "field_validator")


def _enum_classes(tree: ast.Module) -> dict[str, dict[str, Any]]:
    """Every Enum the file defines (nested ones too): its base and its members' values."""
    enums: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(b in ENUM_BASES for b in _base_names(node)):
            members: dict[str, Any] = {}
            for statement in node.body:
                if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                    target = statement.targets[0]
                    if isinstance(target, ast.Name):
                        members[target.id] = _literal(statement.value)
            base = next(b for b in _base_names(node) if b in ENUM_BASES)
            enums[node.name] = {"base": base, "members": members}
    return enums


def _type_aliases(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level `Name = <type>` and `Name: TypeAlias = <type>` assignments."""
    aliases: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            aliases[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            aliases[node.target.id] = node.value
    return aliases


class _TypeReader:
    """Annotations as JSON type descriptions the double can rebuild pydantic types from."""

    def __init__(self, tree: ast.Module, classes: dict[str, ast.ClassDef], enums: dict[str, Any]) -> None:
        self.classes = classes
        self.enums = enums
        self.aliases = _type_aliases(tree)

    def read(self, node: ast.expr) -> dict[str, Any]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a forward reference
            return self.read(ast.parse(node.value, mode="eval").body)
        if isinstance(node, ast.Constant) and node.value is None:
            return {"type": "none"}
        if isinstance(node, ast.Attribute):  # e.g. GuidedDecodingConfig.GuidedDecodingBackend
            return self._named(node.attr)
        if isinstance(node, ast.Name):
            return self._named(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self._union([node.left, node.right])
        if isinstance(node, ast.Subscript):
            origin = ast.unparse(node.value).split(".")[-1]
            arguments = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
            if origin == "Optional":
                return {"type": "optional", "of": self.read(arguments[0])}
            if origin == "Union":
                return self._union(arguments)
            if origin == "Literal":
                return {"type": "literal", "values": [_literal(a) for a in arguments]}
            if origin == "Annotated":
                return self.read(arguments[0])
            if origin in CONTAINERS:
                return {"type": CONTAINERS[origin], "of": self.read(arguments[0])}
            if origin in ("Dict", "dict"):
                return {"type": "dict", "key": self.read(arguments[0]), "value": self.read(arguments[1])}
        return {"type": "any", "name": ast.unparse(node)}

    def _union(self, members: list[ast.expr]) -> dict[str, Any]:
        described = [self.read(m) for m in members]
        present = [d for d in described if d["type"] != "none"]
        union = present[0] if len(present) == 1 else {"type": "union", "of": present}
        return {"type": "optional", "of": union} if len(present) < len(described) else union

    def _named(self, name: str) -> dict[str, Any]:
        if name in SCALARS:
            return {"type": SCALARS[name]}
        if name in ANYTHING:
            return {"type": "any"}
        if name in CONSTRAINED_NUMBERS:
            return dict(CONSTRAINED_NUMBERS[name])
        if name in self.enums:
            return {"type": "enum", "enum": name}
        if name in self.classes and _is_strict(name, self.classes):
            return {"type": "model", "class": name}
        if name in self.aliases and name not in self.classes:
            return self.read(self.aliases[name])
        # Classes of other modules (LoraConfig, CpType, TokenizerBase): not checked deeper.
        return {"type": "any", "name": name}


def _field_call(statement: ast.AnnAssign) -> ast.Call | None:
    value = statement.value
    return value if isinstance(value, ast.Call) and _call_name(value) in ("Field", "PydanticField") else None


def _field_description(statement: ast.AnnAssign, reader: _TypeReader) -> dict[str, Any]:
    """Type, bounds and default of one field declaration."""
    described: dict[str, Any] = {"type": reader.read(statement.annotation)}
    call = _field_call(statement)
    keywords = {k.arg: k.value for k in call.keywords if k.arg} if call is not None else {}
    bounds = {name: _literal(keywords[name]) for name in BOUNDS if name in keywords}
    if bounds:
        described["bounds"] = bounds
    if call is not None:
        default = keywords.get("default", call.args[0] if call.args else None)
    else:
        default = statement.value
    if "default_factory" in keywords:
        described["default_factory"] = ast.unparse(keywords["default_factory"])
    elif default is None or (isinstance(default, ast.Constant) and default.value is Ellipsis):
        described["required"] = True
    else:
        try:
            described["default"] = ast.literal_eval(default)
        except ValueError:  # an enum member or an expression: recorded as written
            described["default_source"] = ast.unparse(default)
    return described


def _declarations(name: str, classes: dict[str, ast.ClassDef]) -> dict[str, ast.AnnAssign]:
    """Every field declaration of a class, inherited ones first, a redeclaration replacing the inherited."""
    declared: dict[str, ast.AnnAssign] = {}
    for base in _base_names(classes[name]):
        if base in classes:
            declared.update(_declarations(base, classes))
    for statement in classes[name].body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            field = statement.target.id
            if not field.startswith("_") and not ast.unparse(statement.annotation).startswith("ClassVar"):
                declared[field] = statement
    return declared


def _message(node: ast.expr) -> str:
    """An exception's message as written, f-string parts as `{expression}`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append("{" + ast.unparse(value.value) + "}")
        return "".join(parts)
    return ast.unparse(node)


def _validators(name: str, classes: dict[str, ast.ClassDef]) -> list[dict[str, Any]]:
    """The pydantic validators a class body declares: method, decorator, mode, fields, line, raises."""
    found = []
    for statement in classes[name].body:
        if not isinstance(statement, ast.FunctionDef):
            continue
        for decorator in statement.decorator_list:
            if isinstance(decorator, ast.Call) and _call_name(decorator) in VALIDATOR_DECORATORS:
                keywords = {k.arg: _literal(k.value) for k in decorator.keywords if k.arg}
                raises = [
                    {"exception": _call_name(node.exc.func), "message": _message(node.exc.args[0])}
                    for node in ast.walk(statement)
                    if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args
                ]
                found.append(
                    {
                        "method": statement.name,
                        "decorator": _call_name(decorator),
                        "mode": keywords.get("mode", "after"),
                        "fields": _strings(decorator.args),
                        "line": statement.lineno,
                        "raises": raises,
                    }
                )
    return found


def _field_mapping(sources: list[str]) -> list[str]:
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and node.name == "update_llm_args_with_extra_dict":
                for statement in ast.walk(node):
                    if (
                        isinstance(statement, ast.Assign)
                        and any(
                            isinstance(t, ast.Name) and t.id == "field_mapping" for t in statement.targets
                        )
                        and isinstance(statement.value, ast.Dict)
                    ):
                        return _strings([k for k in statement.value.keys if k is not None])
    raise ExtractionError("llm_args.py / llm_utils.py: no field_mapping in update_llm_args_with_extra_dict")


def _walk_type(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for key in ("of", "key", "value"):
        child = node.get(key)
        for part in child if isinstance(child, list) else [child] if child is not None else []:
            yield from _walk_type(part)


def extract_llm_args(llm_args_source: str, llm_utils_source: str | None) -> dict[str, Any]:
    """TorchLlmArgs' fields, the strict classes nested under them (recursively) and their fields."""
    tree = ast.parse(llm_args_source)
    classes = _classes(tree)
    if ARGS_CLASS not in classes:
        raise ExtractionError(f"llm_args.py: no `class {ARGS_CLASS}`")
    nested_classes: dict[str, dict[str, str | None]] = {}
    aliases: dict[str, dict[str, str]] = {}

    def describe(class_name: str) -> dict[str, str | None]:
        """Field name -> the strict class its value is validated as (None: not checked deeper)."""
        fields: dict[str, str | None] = {}
        for field, (annotation, alias) in sorted(_fields(class_name, classes).items()):
            nested = _nested_class(annotation, classes)
            fields[field] = nested
            if alias is not None and alias != field:
                aliases.setdefault(class_name, {})[field] = alias
            if nested is not None and nested not in nested_classes:
                nested_classes[nested] = {}  # placeholder against cycles
                nested_classes[nested] = describe(nested)
        return fields

    top = describe(ARGS_CLASS)
    enums = _enum_classes(tree)
    reader = _TypeReader(tree, classes, enums)
    described = [ARGS_CLASS, *sorted(nested_classes)]
    types = {
        name: {
            field: _field_description(d, reader) for field, d in sorted(_declarations(name, classes).items())
        }
        for name in described
    }
    # The validators of each described class and of the classes it derives from (in this file).
    lineage: dict[str, list[str]] = {}

    def ancestors(name: str) -> list[str]:
        own = [b for b in _base_names(classes[name]) if b in classes]
        return [a for b in own for a in ancestors(b)] + [name]

    for name in described:
        lineage[name] = ancestors(name)
    validators = {
        owner: _validators(owner, classes)
        for owner in dict.fromkeys(o for name in described for o in lineage[name])
        if _validators(owner, classes)
    }
    used_enums = {
        node["enum"]
        for t in types.values()
        for d in t.values()
        for node in _walk_type(d["type"])
        if "enum" in node
    }
    return {
        "class": ARGS_CLASS,
        "extra_forbidden": _forbids_extra(classes[BASE_ARGS_CLASS]) if BASE_ARGS_CLASS in classes else False,
        "strict_root": STRICT_ROOT,
        "fields": top,
        "classes": dict(sorted(nested_classes.items())),
        "types": types,
        "enums": {name: enums[name] for name in sorted(used_enums)},
        "bases": {name: lineage[name][:-1] for name in described if lineage[name][:-1]},
        "validators": validators,
        "aliases": aliases,
        "built_by_class_from_yaml": _field_mapping([s for s in (llm_args_source, llm_utils_source) if s]),
        "popped_for_pytorch": list(POPPED_FOR_PYTORCH),
    }


# --- collector.py --------------------------------------------------------------------------------------


def extract_metrics(collector_source: str) -> dict[str, Any]:
    """The metric prefix and every `self.metric_prefix + "name"`."""
    prefix = None
    names: list[str] = []
    for node in ast.walk(ast.parse(collector_source)):
        if (
            isinstance(node, ast.Assign)
            and any(ast.unparse(t) == "self.metric_prefix" for t in node.targets)
            and isinstance(node.value, ast.Constant)
        ):
            prefix = node.value.value
        if (
            isinstance(node, ast.BinOp)
            and ast.unparse(node.left) == "self.metric_prefix"
            and isinstance(node.right, ast.Constant)
            and isinstance(node.right.value, str)
        ):
            names.append(node.right.value)
    if not isinstance(prefix, str) or not names:
        raise ExtractionError("collector.py: no `self.metric_prefix` metrics")
    return {"names": [f"{prefix}{n}" for n in dict.fromkeys(names)]}


# --- driver --------------------------------------------------------------------------------------------


def extract(read: Reader, sources: dict[str, Any]) -> dict[str, Any]:
    """All facts, from a function that returns a repository file's text (or None when absent)."""
    texts = {path: read(path) for path in (*REQUIRED, LLM_UTILS)}
    missing = [path for path in REQUIRED if texts[path] is None]
    if missing:
        raise ExtractionError(f"sources missing: {', '.join(missing)}")

    def text(path: str) -> str:
        value = texts[path]
        assert value is not None
        return value

    levels = extract_log_levels(text(LOGGER))
    return {
        "generated_by": "tools/trtllm_serve/extract_facts.py",
        "sources": sources,
        "cli": extract_cli(text(SERVE), extract_build_defaults(text(BUILDER)), levels),
        "log_levels": levels,
        "llm_args": extract_llm_args(text(LLM_ARGS), texts[LLM_UTILS]),
        "prometheus": extract_metrics(text(COLLECTOR)),
    }


def _git_reader(git_dir: Path, rev: str) -> Reader:
    def read(path: str) -> str | None:
        result = subprocess.run(
            ["git", f"--git-dir={git_dir}", "show", f"{rev}:{path}"],
            capture_output=True,
            text=True,
            check=False,
        )
        return result.stdout if result.returncode == 0 else None

    return read


def _tree_reader(root: Path) -> Reader:
    def read(path: str) -> str | None:
        file = root / path
        return file.read_text() if file.is_file() else None

    return read


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, extract, write the JSON file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--git-dir", type=Path, help="a TensorRT-LLM git directory (with --rev)")
    where.add_argument("--source-root", type=Path, help="a directory laid out like the repository")
    parser.add_argument("--rev", default="v1.2.1", help="the tag or commit to read with --git-dir")
    parser.add_argument("--sources", type=Path, help="with --source-root: the provenance JSON to record")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    if args.git_dir is not None:
        commit = subprocess.run(
            ["git", f"--git-dir={args.git_dir}", "rev-parse", f"{args.rev}^{{commit}}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        reader, sources = _git_reader(args.git_dir, args.rev), {"rev": args.rev, "commit": commit}
    else:
        if args.sources is None:
            parser.error("--source-root needs --sources (the provenance to record)")
        reader, sources = _tree_reader(args.source_root), json.loads(args.sources.read_text())
    try:
        facts = extract(reader, sources)
    except ExtractionError as error:
        print(f"extract_facts: {error}", file=sys.stderr)
        return 1
    args.output.write_text(json.dumps(facts, indent=1, sort_keys=False) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
