"""Generate the MultimodalDeployment CRD from the pydantic models.

A pydantic JSON schema is not yet a Kubernetes structural schema: references must be inlined, optional
fields are `anyOf [X, null]`, titles and `additionalProperties: false` are not allowed next to
`properties`, and exclusive bounds use the OpenAPI v3.0 boolean form. `crd()` owns that conversion.
`make generate` writes it under `crds/`; a test fails when it drifts. Pure: imports only the api
models, pydantic and PyYAML, and does no I/O.
"""

from __future__ import annotations

import typing
from typing import Any

import yaml
from pydantic import BaseModel

from mmd_operator.api import v1alpha1

CRD_FILE_NAME = f"{v1alpha1.GROUP}_{v1alpha1.PLURAL}.yaml"

_READY_CONDITION = '.status.conditions[?(@.type=="Ready")]'
# `kubectl get mmd` says why a resource is not Ready (the Ready condition's reason) and how far a running
# build or download is; `-o wide` adds the serving pods wanted, the runtime, the commit a trtllm-serve
# resource serves, and the message, the sentence to act on.
_PRINTER_COLUMNS = [
    {"name": "Type", "type": "string", "jsonPath": ".spec.model.type"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Reason", "type": "string", "jsonPath": f"{_READY_CONDITION}.reason"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Rollout", "type": "string", "jsonPath": ".status.rollout"},
    {"name": "Progress", "type": "string", "jsonPath": ".status.progress"},
    # What the operator or, with autoscaling, the autoscaler wants (status.replicas), not the spec's number.
    {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas", "priority": 1},
    {"name": "TP", "type": "integer", "jsonPath": ".spec.engine.tensorParallelSize", "priority": 1},
    {"name": "Pods/Replica", "type": "integer", "jsonPath": ".status.podsPerReplica", "priority": 1},
    # Empty: triton-trtllm-engine (a spec that names no runtime).
    {"name": "Runtime", "type": "string", "jsonPath": ".spec.runtime", "priority": 1},
    {"name": "Commit", "type": "string", "jsonPath": ".status.weights.commit", "priority": 1},
    {"name": "GPU", "type": "string", "jsonPath": ".status.engine.gpu.product", "priority": 1},
    {"name": "TRT-LLM", "type": "string", "jsonPath": ".status.engine.tensorrtLlmVersion", "priority": 1},
    {"name": "Cache-Key", "type": "string", "jsonPath": ".status.engine.cacheKey"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Message", "type": "string", "jsonPath": f"{_READY_CONDITION}.message", "priority": 1},
]

# Keys of the JSON schema that have no place in a structural schema.
_DROPPED_KEYS = frozenset({"title", "additionalProperties", "$defs"})
_PRESERVE_UNKNOWN = "x-kubernetes-preserve-unknown-fields"

# Object names the operator derives from the resource's name must be valid; CEL sees metadata.name.
NAME_RULE = v1alpha1.cel_rule(
    f"self.metadata.name.matches('{v1alpha1.DNS_LABEL_PATTERN}') && "
    f"size(self.metadata.name) <= {v1alpha1.MAX_NAME_LENGTH}",
    "metadata.name ({self.metadata.name}, {size(self.metadata.name)} characters) must be a DNS label "
    f"(lower-case letters, digits, '-', starting with a letter) of at most {v1alpha1.MAX_NAME_LENGTH} "
    "characters: the Service, Deployment and ConfigMaps are named after it",
    field_path=".metadata.name",
)


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline `$ref`s, unwrap optionals and rewrite keywords the API server does not accept."""
    node = dict(node)
    if node.get("x-kubernetes-int-or-string"):
        # Already in the form the API server wants: integer or string (`anyOf` both), one pattern.
        if "description" in node:
            node["description"] = " ".join(node["description"].split())
        return {key: value for key, value in node.items() if key not in _DROPPED_KEYS}
    if "anyOf" in node:
        variants = [v for v in node.pop("anyOf") if v.get("type") != "null"]
        if len(variants) != 1:
            raise ValueError(f"unsupported union in schema: {variants}")
        node = {**variants[0], **node}
        if node.get("default", ...) is None:
            del node["default"]
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        node = {**target, **node}  # the field's own description wins over the type's docstring
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), int | float) and not isinstance(node[bound], bool):
            node[plain] = node[bound]
            node[bound] = True
    if "description" in node:
        # Docstrings wrap lines; kubectl explain re-flows text itself.
        node["description"] = " ".join(node["description"].split())
    resolved = {key: value for key, value in node.items() if key not in _DROPPED_KEYS}
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and not node.get(_PRESERVE_UNKNOWN):
        # A map: every value has this schema (a bare `true`/`false` is not structural).
        resolved["additionalProperties"] = _resolve(extra, defs)
    if "properties" in node:
        resolved["properties"] = {name: _resolve(schema, defs) for name, schema in node["properties"].items()}
        resolved["type"] = "object"
    if "items" in node:
        resolved["items"] = _resolve(node["items"], defs)
    return resolved


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Return the structural OpenAPI v3 schema of a pydantic model."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    schema: dict[str, Any] = _resolve(raw, defs)
    return schema


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as `X`, `X | None` or `list[X]`, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _nested_model(argument)
        if found is not None:
            return found
    return None


def _without_empty(value: Any) -> Any:
    """`value` without empty maps and lists, at any depth (a map left empty by that goes too)."""
    if isinstance(value, dict):
        kept = {key: _without_empty(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in ({}, [])}
    if isinstance(value, list):
        return [_without_empty(item) for item in value]
    return value


def _apply_section_defaults(model: type[BaseModel], schema: dict[str, Any]) -> None:
    """Give sections that default to an all-defaults object that object as their schema default.

    The API server checks a default against the section's CEL rules as it stands, without filling in
    the defaults of the fields inside it, so an empty object would fail rules that read those fields.
    Empty maps and lists are left out, and so is a section with nothing else (`serving.pod`,
    `engine.vision`): the stored spec (`kubectl get -o yaml`, `describe`) then shows what the user wrote
    and the defaults that say something; the pydantic models fill in the rest when the spec is read.
    """
    for name, field in model.model_fields.items():
        child = schema.get("properties", {}).get(field.alias or name)
        if child is None:
            continue
        factory = field.default_factory
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            default = _without_empty(factory().model_dump(by_alias=True, exclude_none=True, mode="json"))
            if default:
                child["default"] = default
        nested = _nested_model(field.annotation)
        if nested is not None:
            _apply_section_defaults(nested, child.get("items", child))


def _allow_null_sections(schema: dict[str, Any]) -> None:
    """Mark the optional objects, maps and lists without a default `nullable`.

    Server-side apply turns a section emptied in the applied file (`pod: {}` after `pod: {labels: ...}`)
    into null (kubernetes/kubernetes#104694), which a non-nullable object refuses (`must be of type
    object: "null"`) unless a default replaces it, and these sections have no default (nothing empty is
    stored). Null reads as absent everywhere: CEL's has() is false for it and the models drop it.
    """
    required = set(schema.get("required", ()))
    for name, child in schema.get("properties", {}).items():
        if name not in required and "default" not in child and child.get("type") in {"object", "array"}:
            child["nullable"] = True
        _allow_null_sections(child)
    if "items" in schema:
        _allow_null_sections(schema["items"])
    if isinstance(schema.get("additionalProperties"), dict):
        _allow_null_sections(schema["additionalProperties"])


def crd() -> dict[str, Any]:
    """Return the CustomResourceDefinition of MultimodalDeployment as a plain dict."""
    spec = structural_schema(v1alpha1.MultimodalDeploymentSpec)
    # Sections with all-default fields must exist, filled in, for the CEL rules that read them.
    _apply_section_defaults(v1alpha1.MultimodalDeploymentSpec, spec)
    _allow_null_sections(spec)
    status = structural_schema(v1alpha1.MultimodalDeploymentStatus)
    conditions = status["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    for required in ("type", "status", "reason"):
        assert required in conditions["items"]["required"]
    # A new resource reads as generation 1 not yet observed (status.observedGeneration 0), not as a
    # resource without status, which kstatus (Flux) would call Current before the operator saw it.
    status["default"] = {}
    status["properties"]["observedGeneration"]["default"] = 0
    root_description = (v1alpha1.MultimodalDeployment.__doc__ or "").strip()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{v1alpha1.PLURAL}.{v1alpha1.GROUP}"},
        "spec": {
            "group": v1alpha1.GROUP,
            "names": {
                "kind": v1alpha1.KIND,
                "listKind": f"{v1alpha1.KIND}List",
                "plural": v1alpha1.PLURAL,
                "singular": v1alpha1.SINGULAR,
                "shortNames": list(v1alpha1.SHORT_NAMES),
                "categories": ["ml"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": v1alpha1.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.serving.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": _PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": root_description,
                            "required": ["spec"],
                            "x-kubernetes-validations": [NAME_RULE],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                # Declared so that NAME_RULE can report at metadata.name.
                                "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def render_yaml() -> str:
    """Return the CRD as the YAML text committed under `crds/`."""
    header = "# Generated by `make generate` from the pydantic models in mmd_operator.api. Do not edit.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=100)
