"""Turn a MultimodalDeployment document into a validated model, or into a list of precise problems.

Validation happens in the same order as at the API server: the structural schema (pydantic), then the
CEL rules declared on the models, evaluated offline with cel-python on the object as the API server would
store it (the schema's defaults filled in), with the same words (the rules' message expressions). Every
problem names the field path and the rule. Pure: imports pydantic, celpy and the api models; no I/O.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any, TypeVar, cast

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError, CELFunction
from pydantic import ValidationError

from mmd_operator.api import crdgen, quantities, v1alpha1
from mmd_operator.knowledge import Runtime


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a resource: where (a field path) and which rule it breaks."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class InvalidSpecError(Exception):
    """The resource breaks one or more rules; nothing should be created from it."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = sorted(set(problems))
        super().__init__("; ".join(str(p) for p in self.problems))


# Names pydantic gives the members of an `int | str` union in error locations.
_UNION_MEMBERS = frozenset({"int", "str", "constrained-str"})
_PYDANTIC_PHRASES = (("Input should be", "must be"), ("Value error, ", ""), ("String should", "must"))


def _locate(loc: Sequence[int | str], schema: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The field path of `loc` as the API server writes it, and the schema of the object holding its end.

    Map keys are written in brackets (`resources.limits[memory]`), fields after a dot.
    """
    text, parent = "", schema
    for part in loc:
        parent = schema
        if isinstance(part, int):
            text += f"[{part}]"
            schema = schema.get("items", {})
        elif part not in schema.get("properties", {}) and isinstance(
            schema.get("additionalProperties"), dict
        ):
            text += f"[{part}]"
            schema = schema["additionalProperties"]
        else:
            text += f".{part}" if text else part
            schema = schema.get("properties", {}).get(part, {})
    return text, parent


def _shown(value: Any) -> str:
    """`value` as the API server prints it (JSON; a whole float as an integer, as Go prints it)."""
    text = json.dumps(int(value) if isinstance(value, float) and value.is_integer() else value)
    return f"{text[:80]}..." if len(text) > 80 else text


def _pydantic_message(error: Mapping[str, Any], parent: Mapping[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        known = list(parent.get("properties", {}))
        close = difflib.get_close_matches(str(error["loc"][-1]), known, n=1)
        return f"unknown field; did you mean {close[0]}?" if close else "unknown field"
    if error["type"] == "missing":
        return "required field is missing"
    message = str(error["msg"])
    for phrase, replacement in _PYDANTIC_PHRASES:
        message = message.replace(phrase, replacement)
    if isinstance(error.get("input"), str | int | float | bool):
        # The value itself, as the API server shows it (`Invalid value: 4096: ...`).
        message = f"is {_shown(error['input'])} but {message}"
    return message


def _schema_problems(error: ValidationError, prefix: str) -> list[Problem]:
    problems = []
    for item in error.errors():
        # Unions report one error per member; the member name in the location only adds noise.
        loc = [
            part
            for part in item["loc"]
            if not (isinstance(part, str) and (part.startswith("function-") or part in _UNION_MEMBERS))
        ]
        path, parent = _locate(loc, _spec_schema())
        problems.append(Problem(f"{prefix}.{path}" if path else prefix, _pydantic_message(item, parent)))
    return problems


# One environment for every rule. Creating it raises the interpreter's recursion limit (CEL's nesting
# minimums need it), so that happens once, at import, instead of in the middle of some later call.
_CEL = celpy.Environment()


def _is_quantity(value: celtypes.Value) -> celtypes.BoolType:
    """Kubernetes' CEL `isQuantity`, which cel-python lacks: whether a string parses as a quantity."""
    return celtypes.BoolType(isinstance(value, str) and quantities.is_quantity(str(value)))


def _quantity(value: celtypes.Value) -> celtypes.Value:
    """Kubernetes' CEL `quantity(string)`: the value its comparisons below take."""
    if not isinstance(value, str):
        raise TypeError("quantity needs a string")
    # cel-python passes any value a function returns on; only the comparisons below read this one.
    return cast(celtypes.Value, quantities.Quantity(quantities.parse(str(value))))


@dataclass(frozen=True, order=True)
class SemVer:
    """Kubernetes' CEL semantic version (a DRA device's version attribute, `semver(string)`)."""

    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> SemVer:
        """`9.0.0` (a missing minor or patch is 0).

        Raises:
            ValueError: when `text` is not a version.
        """
        parts = text.split("-", 1)[0].split("+", 1)[0].split(".")
        if not 1 <= len(parts) <= 3 or not all(part.isdigit() for part in parts):
            raise ValueError(f"{text!r} is not a semantic version")
        major, minor, patch = (*map(int, parts), 0, 0)[:3]
        return cls(major, minor, patch)


def _semver(value: celtypes.Value) -> celtypes.Value:
    """Kubernetes' CEL `semver(string)`."""
    if not isinstance(value, str):
        raise TypeError("semver needs a string")
    return cast(celtypes.Value, SemVer.parse(str(value)))


def _compare_to(value: celtypes.Value, other: celtypes.Value) -> celtypes.IntType:
    if isinstance(value, SemVer) and isinstance(other, SemVer):
        return celtypes.IntType((value > other) - (value < other))
    if not isinstance(value, quantities.Quantity) or not isinstance(other, quantities.Quantity):
        raise TypeError("compareTo needs two quantities or two versions")
    return celtypes.IntType(value.compare(other))


def _is_greater_than(value: celtypes.Value, other: celtypes.Value) -> celtypes.BoolType:
    return celtypes.BoolType(_compare_to(value, other) > 0)


def _is_less_than(value: celtypes.Value, other: celtypes.Value) -> celtypes.BoolType:
    return celtypes.BoolType(_compare_to(value, other) < 0)


def _as_go_text(value: celtypes.Value) -> str:
    if isinstance(value, bool | celtypes.BoolType):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _format(template: celtypes.Value, values: celtypes.Value) -> celtypes.StringType:
    """cel-go's `string.format(list)` for the `%s` the rules' messages use, which cel-python lacks."""
    if not isinstance(template, str) or not isinstance(values, list):
        raise TypeError("format needs a string and a list")
    pending = iter(values)
    return celtypes.StringType(
        re.sub(r"%[s%]", lambda verb: "%" if verb[0] == "%%" else _as_go_text(next(pending)), template)
    )


# The functions of the API server's CEL environment that the rules use and cel-python does not have.
_KUBERNETES_FUNCTIONS: dict[str, CELFunction] = {
    "isQuantity": _is_quantity,
    "quantity": _quantity,
    "compareTo": _compare_to,
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
    "format": _format,
    "semver": _semver,
}


@cache
def cel_program(expression: str) -> celpy.Runner:
    """The compiled CEL `expression`, with Kubernetes' `format` and `isQuantity`; compiled once."""
    return _CEL.program(_CEL.compile(expression), functions=_KUBERNETES_FUNCTIONS)


def compile_rules() -> int:
    """Compile the CRD's CEL rules (of the spec and the name) now; returns how many expressions there are.

    For a long-running process, at start: compiling is the costly part of a rule's first use.
    """
    expressions: list[str] = [str(crdgen.NAME_RULE["rule"])]
    pending: list[Any] = [_spec_schema()]
    while pending:
        node = pending.pop()
        if isinstance(node, Mapping):
            for rule in node.get("x-kubernetes-validations", ()):
                expressions.append(str(rule["rule"]))
                if "messageExpression" in rule:
                    expressions.append(str(rule["messageExpression"]))
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    for expression in expressions:
        cel_program(expression)
    return len(expressions)


@cache
def _spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["spec"]  # type: ignore[no-any-return]


def _with_defaults(value: Any, schema: Mapping[str, Any]) -> Any:
    """`value` as the API server's rules see it: the schema's defaults filled in where a field is missing.

    As structural defaulting does, in every object present, defaults included; a null field is left out
    (the API server drops it, defaults it, or keeps it where has() reads it as absent).
    """
    if isinstance(value, Mapping):
        properties = schema.get("properties", {})
        filled = {
            name: copy.deepcopy(child["default"])
            for name, child in properties.items()
            if value.get(name) is None and "default" in child
        }
        filled.update({name: item for name, item in value.items() if item is not None})
        values_schema = schema.get("additionalProperties")
        return {
            name: _with_defaults(
                item, properties.get(name, values_schema if isinstance(values_schema, Mapping) else {})
            )
            for name, item in filled.items()
        }
    if isinstance(value, list):
        return [_with_defaults(item, schema.get("items", {})) for item in value]
    return value


def spec_runtime(spec: object) -> Runtime:
    """The runtime a spec document names, read before (or without) validating it.

    Its default when it names none, or names one that does not exist (the spec is then refused for that).
    """
    named = spec.get("runtime") if isinstance(spec, Mapping) else None
    return Runtime(named) if named in tuple(Runtime) else Runtime.TRITON_TRTLLM_ENGINE


def stored_spec(document: Mapping[str, Any]) -> dict[str, Any]:
    """A `spec` mapping as the API server stores it (the CRD's defaults filled in), in JSON types.

    What the CEL rules see, at the API server and here; nothing else is added (no empty maps or lists),
    and a null field is left out.
    """
    stored: dict[str, Any] = _with_defaults(json.loads(json.dumps(document, default=str)), _spec_schema())
    return stored


_NO_OLD = object()
_T = TypeVar("_T")


def rule_failure(rule: Mapping[str, Any], value: Any, old: Any = _NO_OLD) -> str | None:
    """The message the API server writes when `value` breaks `rule`; None when it holds.

    `rule` is an `x-kubernetes-validations` entry; `old` is the stored value, for a transition rule. The
    message is the message expression's text, or the static message when the expression fails to
    evaluate or gives no one-line text, as the API server falls back.
    """
    activation = {"self": json_to_cel(value)}
    if old is not _NO_OLD:
        activation["oldSelf"] = json_to_cel(old)
    return _failure(rule, activation)


def _failure(rule: Mapping[str, Any], activation: dict[str, Any]) -> str | None:
    try:
        if bool(cel_program(rule["rule"]).evaluate(activation)):
            return None
    except CELEvalError as error:
        return f"rule {rule['rule']!r} could not be evaluated: {error}"
    expression = rule.get("messageExpression")
    if expression:
        try:
            text = cel_program(expression).evaluate(activation)
        except CELEvalError:
            text = None
        if isinstance(text, str) and text.strip() and "\n" not in text.strip():
            return text.strip()
    return str(rule["message"]).strip()


# A field path as a CEL expression reads it from a variable: `self.engine.maxBatchSize`, `has(self.a.b)`.
# What follows the variable's name up to anything that is not `.name` (an index, an operator, `.?`).
_READ_PATH = r"(?<![\w.]){variable}\b((?:\s*\.\s*[A-Za-z_]\w*)*)(\s*\()?"


ReadPath = tuple[bool, tuple[str, ...]]  # whether only the presence of the last name is read; the names


@cache
def read_paths(variable: str, *expressions: str) -> tuple[ReadPath, ...]:
    """The field paths of `variable` that `expressions` read, each as far as it is written.

    A rule's value depends on nothing of `variable` but these (with `variable` alone, the path is empty:
    all of it). A path followed by `(` ends in a method (`self.name.matches(...)`), so the method is
    dropped; a path cut short at an index or a macro only reads more than it needs; a path that is all
    of `has(...)` reads only whether its last field is there. Text inside string literals can only add
    paths, never lose one.
    """
    pattern = re.compile(_READ_PATH.format(variable=re.escape(variable)))
    paths: set[ReadPath] = set()
    for expression in expressions:
        for match in pattern.finditer(expression):
            names = tuple(part.strip() for part in match[1].split(".")[1:])
            if match[2]:
                paths.add((False, names[:-1]))
                continue
            presence = (
                bool(names)
                and expression[: match.start()].rstrip().endswith("has(")
                and expression[match.end() :].lstrip().startswith(")")
            )
            paths.add((presence, names))
    return tuple(sorted(paths))


def projection(value: Any, paths: Iterable[ReadPath]) -> str:
    """What of `value` an expression reading `paths` can see, as text: equal texts, equal results.

    Each path's value as JSON (in its own key order: a macro over a map sees that order), or for a
    `has()` whether its last field is there; where the path ends early, how: the key missing from a
    map, or the JSON of what is not a map.
    """
    seen = []
    for presence, names in paths:
        current = value
        walked = names[:-1] if presence else names
        for depth, name in enumerate(walked):
            if not isinstance(current, Mapping):
                seen.append(["not a map", depth, current])
                break
            if name not in current:
                seen.append(["missing", depth])
                break
            current = current[name]
        else:
            if not presence:
                seen.append(["value", current])
            elif isinstance(current, Mapping):
                seen.append(["has", names[-1] in current])
            else:
                seen.append(["not a map", len(walked), current])
    return json.dumps(seen, default=str)


# Verdicts of CEL rules already evaluated, by rule and by what the rule read of its value (`projection`).
# Specs that differ in a field or two (an engine's batch size) break or keep the same rules, and a rule
# takes cel-python about a millisecond: most of the time planning a new spec took.
_REMEMBERED: dict[tuple[str, ...], Any] = {}
_REMEMBERED_HELD = 4096


def remembered(key: tuple[str, ...], evaluate: Callable[[], _T]) -> _T:
    """The value `evaluate` gave for `key` before (a rule and what it reads), else evaluated now."""
    if key in _REMEMBERED:
        return cast(_T, _REMEMBERED[key])
    found = evaluate()
    if len(_REMEMBERED) >= _REMEMBERED_HELD:
        _REMEMBERED.clear()  # a bound, not a policy: the rules of the specs in use come back in one plan
    _REMEMBERED[key] = found
    return found


def _remembered_failure(
    rule: Mapping[str, Any], value: Any, activation: Callable[[], dict[str, Any]]
) -> str | None:
    expression, message_expression = str(rule["rule"]), str(rule.get("messageExpression", ""))
    paths = read_paths("self", expression, message_expression)
    key = (expression, message_expression, str(rule.get("message", "")), projection(value, paths))
    return remembered(key, lambda: _failure(rule, activation()))


def _cel_problems(value: Any, schema: Mapping[str, Any], path: str, old: Any = _NO_OLD) -> list[Problem]:
    """Problems of `value` under the CEL rules of `schema`; transition rules (`oldSelf`) only with `old`."""
    problems = []
    rules = schema.get("x-kubernetes-validations", ())
    converted: dict[str, Any] = {}

    def current() -> dict[str, Any]:
        # Converted once for all the rules of this node, and only when one is evaluated: converting the
        # whole spec again for each rule at its root was a quarter of the time planning a spec took.
        if "self" not in converted:
            converted["self"] = json_to_cel(value)
        return converted

    for rule in rules:
        target = (path + rule.get("fieldPath", "")).lstrip(".")
        if "oldSelf" not in rule["rule"]:
            message = _remembered_failure(rule, value, current)
        elif old is not _NO_OLD:
            message = _failure(rule, {**current(), "oldSelf": json_to_cel(old)})
        else:
            continue  # a transition rule: only an update can break it
        if message is not None:
            problems.append(Problem(target, message))
    if isinstance(value, Mapping):
        properties = schema.get("properties", {})
        values_schema = schema.get("additionalProperties")
        for name, item in value.items():
            if name in properties:
                old_child = old.get(name, _NO_OLD) if isinstance(old, Mapping) else _NO_OLD
                problems += _cel_problems(item, properties[name], f"{path}.{name}", old_child)
            elif isinstance(values_schema, Mapping):
                problems += _cel_problems(item, values_schema, f"{path}[{name}]")
    elif isinstance(value, list) and "items" in schema:
        # Like the API server, list items (not map-keyed) have no old value to compare with.
        for index, item in enumerate(value):
            problems += _cel_problems(item, schema["items"], f"{path}[{index}]")
    return problems


# What the API server requires of the metadata of the pods the operator creates: label keys and annotation
# keys are qualified names, label values (and node selector values) label values, and all annotations
# together at most 256 KiB. The CRD cannot say it cheaply (a CEL rule over map keys costs too much), so
# these are checked here and a resource that breaks them is reported InvalidSpec before a Job or
# Deployment with them is refused late.
_NAME_PART = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = re.compile(rf"({_NAME_PART})?")
_QUALIFIED_NAME = re.compile(rf"(?:([^/]+)/)?({_NAME_PART})")
_DNS_SUBDOMAIN = re.compile(v1alpha1.DNS_SUBDOMAIN_PATTERN)
LABEL_VALUE_MAX = 63
ANNOTATIONS_MAX_BYTES = 256 * 1024


def _key_problem(key: str) -> str | None:
    match = _QUALIFIED_NAME.fullmatch(key)
    if match is None or len(match.group(2)) > 63:
        return (
            f"key {key!r} is not a qualified name (an optional DNS-subdomain prefix and '/', then at most 63 "
            "letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
        )
    prefix = match.group(1)
    if prefix is not None and (len(prefix) > 253 or _DNS_SUBDOMAIN.fullmatch(prefix) is None):
        return f"key {key!r} has a prefix {prefix!r} that is not a DNS subdomain"
    return None


def _label_map_problems(values: Mapping[str, str], path: str) -> list[Problem]:
    problems = []
    for key, value in values.items():
        key_problem = _key_problem(key)
        if key_problem is not None:
            problems.append(Problem(path, key_problem))
        if len(value) > LABEL_VALUE_MAX or _LABEL_VALUE.fullmatch(value) is None:
            problems.append(
                Problem(
                    f"{path}[{key}]",
                    f"{value[:80]!r}{'...' if len(value) > 80 else ''} is not a label value (at most "
                    f"{LABEL_VALUE_MAX} letters, digits, '-', '_' or '.', starting and ending with a letter "
                    "or digit)",
                )
            )
    return problems


def pod_metadata_problems(spec: v1alpha1.MultimodalDeploymentSpec) -> list[Problem]:
    """Pod labels, annotations and node selectors the API server would refuse on a Job or Deployment."""
    problems = []
    for section, pod in (("serving", spec.serving.pod), ("build", spec.build.pod)):
        path = f"spec.{section}.pod"
        problems += _label_map_problems(pod.labels, f"{path}.labels")
        problems += _label_map_problems(pod.node_selector, f"{path}.nodeSelector")
        for key in pod.annotations:
            key_problem = _key_problem(key)
            if key_problem is not None:
                problems.append(Problem(f"{path}.annotations", key_problem))
        size = sum(len(key.encode()) + len(value.encode()) for key, value in pod.annotations.items())
        if size > ANNOTATIONS_MAX_BYTES:
            problems.append(
                Problem(
                    f"{path}.annotations",
                    f"the annotations take {size} bytes; Kubernetes allows at most {ANNOTATIONS_MAX_BYTES} "
                    "bytes of annotations on an object",
                )
            )
    return problems


def name_problem(name: str) -> list[Problem]:
    """The problem with a resource name, or none when it fits every object the operator derives from it."""
    return list(_name_problems(name))


_DNS_LABEL = re.compile(v1alpha1.DNS_LABEL_PATTERN)


@lru_cache(maxsize=4096)
def _name_problems(name: str) -> tuple[Problem, ...]:
    # Every reconcile asks (a millisecond of CEL each time); names are few and never change. A name the
    # rule's own pattern and length accept needs no CEL: only a broken one needs the rule's message.
    if _DNS_LABEL.search(name) and len(name) <= v1alpha1.MAX_NAME_LENGTH:
        return ()
    rule = {"x-kubernetes-validations": [crdgen.NAME_RULE]}
    return tuple(_cel_problems({"metadata": {"name": name}}, rule, ""))


def check_spec(
    document: Mapping[str, Any],
) -> tuple[v1alpha1.MultimodalDeploymentSpec | None, list[Problem]]:
    """Check a `spec` mapping (camelCase, as in YAML) against the schema and the CEL rules.

    Returns the model whenever the schema holds, even if CEL rules fail, so that later checks can add
    their problems to the same report; returns None when the schema itself is broken.
    """
    try:
        # Strict JSON validation, as the API server's schema: `"8"` is not an integer nor `"yes"` a boolean.
        # YAML's dates and times become strings, as kubectl sends them.
        text = json.dumps(document, default=str)
        spec = v1alpha1.MultimodalDeploymentSpec.model_validate_json(text, strict=True)
    except ValidationError as error:
        return None, _schema_problems(error, "spec")
    return spec, _cel_problems(stored_spec(document), _spec_schema(), "spec") + pod_metadata_problems(spec)


def check_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    """Problems of changing the spec `old` into `new` (both camelCase mappings): the transition rules.

    Only the rules that compare with the stored object (`oldSelf`), which the API server checks on every
    update; `check_spec` covers the rest.
    """
    old_spec, _ = check_spec(old)
    new_spec, _ = check_spec(new)
    if old_spec is None or new_spec is None:
        return []
    old_value, new_value = stored_spec(old), stored_spec(new)
    return [
        problem
        for problem in _cel_problems(new_value, _spec_schema(), "spec", old_value)
        if problem not in _cel_problems(new_value, _spec_schema(), "spec")
    ]


def parse_spec(document: Mapping[str, Any]) -> v1alpha1.MultimodalDeploymentSpec:
    """Validate a `spec` mapping and return the model.

    Raises:
        InvalidSpecError: with one problem per broken rule, each naming its field path.
    """
    spec, problems = check_spec(document)
    if spec is None or problems:
        raise InvalidSpecError(problems)
    return spec


def check_resource(
    document: Mapping[str, Any],
) -> tuple[v1alpha1.MultimodalDeployment | None, list[Problem]]:
    """Check a whole MultimodalDeployment document (as read from YAML or the API server).

    Returns the model whenever its spec matches the schema, together with every problem found.
    """
    problems = []
    if document.get("apiVersion") != v1alpha1.API_VERSION:
        problems.append(Problem("apiVersion", f"must be {v1alpha1.API_VERSION}"))
    if document.get("kind") != v1alpha1.KIND:
        problems.append(Problem("kind", f"must be {v1alpha1.KIND}"))
    metadata = document.get("metadata") or {}
    if not isinstance(metadata, Mapping) or not metadata.get("name"):
        problems.append(Problem("metadata.name", "required field is missing"))
    else:
        problems += name_problem(str(metadata["name"]))
    spec_document = document.get("spec")
    if not isinstance(spec_document, Mapping):
        return None, [*problems, Problem("spec", "required field is missing")]
    spec, spec_problems = check_spec(spec_document)
    if spec is None:
        return None, [*problems, *spec_problems]
    resource = v1alpha1.MultimodalDeployment(
        metadata=dict(metadata) if isinstance(metadata, Mapping) else {},
        spec=spec,
        status=document.get("status"),
    )
    return resource, [*problems, *spec_problems]
