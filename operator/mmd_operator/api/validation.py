"""Turn a MultimodalDeployment document into a validated model, or into a list of precise problems.

Validation happens in the same order as at the API server: the structural schema (pydantic), then the
CEL rules declared on the models, evaluated offline with cel-python on the defaulted object. Every problem
names the field path and the rule. Pure: imports pydantic, celpy and the api models; no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import celpy
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError
from pydantic import ValidationError

from mmd_operator.api import crdgen, v1alpha1


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


def _path(loc: Iterable[int | str]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


# Names pydantic gives the members of an `int | str` union in error locations.
_UNION_MEMBERS = frozenset({"int", "str", "constrained-str"})
_PYDANTIC_PHRASES = (("Input should be", "must be"), ("Value error, ", ""), ("String should", "must"))


def _pydantic_message(error: Mapping[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown field"
    if error["type"] == "missing":
        return "required field is missing"
    message = str(error["msg"])
    for phrase, replacement in _PYDANTIC_PHRASES:
        message = message.replace(phrase, replacement)
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
        path = _path([prefix, *loc]) if prefix else _path(loc)
        problems.append(Problem(path, _pydantic_message(item)))
    return problems


# One environment for every rule. Creating it raises the interpreter's recursion limit (CEL's nesting
# minimums need it), so that happens once, at import, instead of in the middle of some later call.
_CEL = celpy.Environment()


@cache
def cel_program(expression: str) -> celpy.Runner:
    """The compiled CEL `expression`, compiled once per process."""
    return _CEL.program(_CEL.compile(expression))


@cache
def _spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["spec"]  # type: ignore[no-any-return]


_NO_OLD = object()


def _cel_problems(value: Any, schema: Mapping[str, Any], path: str, old: Any = _NO_OLD) -> list[Problem]:
    """Problems of `value` under the CEL rules of `schema`; transition rules (`oldSelf`) only with `old`."""
    problems = []
    for rule in schema.get("x-kubernetes-validations", ()):
        target = path + rule.get("fieldPath", "")
        transition = "oldSelf" in rule["rule"]
        if transition and old is _NO_OLD:
            continue  # only an update can break it
        activation = {"self": json_to_cel(value)}
        if transition:
            activation["oldSelf"] = json_to_cel(old)
        try:
            passed = bool(cel_program(rule["rule"]).evaluate(activation))
        except CELEvalError as error:
            problems.append(Problem(target, f"rule {rule['rule']!r} could not be evaluated: {error}"))
            continue
        if not passed:
            problems.append(Problem(target, rule["message"]))
    if isinstance(value, Mapping):
        for name, child_schema in schema.get("properties", {}).items():
            if name in value:
                old_child = old.get(name, _NO_OLD) if isinstance(old, Mapping) else _NO_OLD
                problems += _cel_problems(value[name], child_schema, f"{path}.{name}", old_child)
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
    if len(name) <= v1alpha1.MAX_NAME_LENGTH and re.fullmatch(v1alpha1.DNS_LABEL_PATTERN, name) is not None:
        return []
    return [Problem("metadata.name", str(crdgen.NAME_RULE["message"]))]


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
    defaulted = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    return spec, _cel_problems(defaulted, _spec_schema(), "spec") + pod_metadata_problems(spec)


def check_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    """Problems of changing the spec `old` into `new` (both camelCase mappings): the transition rules.

    Only the rules that compare with the stored object (`oldSelf`), which the API server checks on every
    update; `check_spec` covers the rest.
    """
    old_spec, _ = check_spec(old)
    new_spec, _ = check_spec(new)
    if old_spec is None or new_spec is None:
        return []
    dump = {"by_alias": True, "exclude_none": True, "mode": "json"}
    old_value = old_spec.model_dump(**dump)  # type: ignore[arg-type]
    new_value = new_spec.model_dump(**dump)  # type: ignore[arg-type]
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
