"""The CRD is generated from the models, structural, documented, and its CEL rules compile."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import yaml

from mmd_operator.api import crdgen, v1alpha1
from mmd_operator.api.validation import rule_failure

ROOT = Path(__file__).resolve().parents[3]


def _walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    if "items" in schema:
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


def _root_schema() -> dict[str, Any]:
    schema: dict[str, Any] = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_schema_is_structural() -> None:
    for path, node in _walk(_root_schema()):
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        for key in ("$ref", "$defs", "allOf", "oneOf", "title", "const"):
            assert key not in node, f"{path} has {key}"
        # Only an int-or-string quantity may say `anyOf`, in exactly the form the API server allows.
        assert "anyOf" not in node or (
            int_or_string and node["anyOf"] == [{"type": "integer"}, {"type": "string"}]
        )
        # A map has a schema for its values, never a bare true/false next to properties.
        assert "additionalProperties" not in node or (
            isinstance(node["additionalProperties"], dict) and "properties" not in node
        ), path
        if path and not path.endswith("{}"):
            assert "type" in node or "x-kubernetes-preserve-unknown-fields" in node or int_or_string, (
                f"{path} has no type"
            )
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True


def test_every_spec_field_is_described_for_kubectl_explain() -> None:
    spec = _root_schema()["properties"]["spec"]
    undocumented = [
        path for path, node in _walk(spec, "spec") if not node.get("description") and not path.endswith("{}")
    ]
    assert undocumented == []


def test_every_cel_rule_compiles_and_has_a_message_and_a_reason() -> None:
    environment = celpy.Environment()
    rules = [rule for _, node in _walk(_root_schema()) for rule in node.get("x-kubernetes-validations", [])]
    assert len(rules) >= 15
    for rule in rules:
        environment.compile(rule["rule"])
        if "messageExpression" in rule:
            environment.compile(rule["messageExpression"])
        # A static message to fall back on, without the `{...}` of the values.
        assert rule["message"] and "{" not in rule["message"]
        # Forbidden or Required: "Invalid value" would show the node's type ("object"), not a value.
        assert rule["reason"] in {v1alpha1.FORBIDDEN, v1alpha1.REQUIRED}
        assert rule.get("fieldPath", ".").startswith(".")
    assert sum("messageExpression" in rule for rule in rules) >= 20


def test_a_rule_names_its_values_and_falls_back_to_its_static_message() -> None:
    rule = v1alpha1.cel_rule(
        "self.maxSeqLen > self.maxInputLen",
        "maxSeqLen ({self.maxSeqLen}) must be greater than maxInputLen ({self.maxInputLen}); see {self.doc}",
    )
    assert rule["message"] == "maxSeqLen must be greater than maxInputLen"
    assert rule_failure(rule, {"maxSeqLen": 10, "maxInputLen": 20, "doc": "x"}) == (
        "maxSeqLen (10) must be greater than maxInputLen (20); see x"
    )
    assert rule_failure(rule, {"maxSeqLen": 30, "maxInputLen": 20}) is None
    # The expression cannot be evaluated (no `doc`): the static message, as the API server falls back.
    assert rule_failure(rule, {"maxSeqLen": 10, "maxInputLen": 20}) == rule["message"]


def test_names_status_scale_and_printer_columns() -> None:
    crd = crdgen.crd()
    assert crd["metadata"]["name"] == "multimodaldeployments.serving.multimodal.dev"
    assert crd["spec"]["names"]["shortNames"] == ["mmd"]
    # Not in `all`: `kubectl delete all --all` must not delete models (and, through their owner
    # references, their Deployments and Jobs). `kubectl get ml` lists them.
    assert crd["spec"]["names"]["categories"] == ["ml"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.serving.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    shown = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert shown == ["Type", "Phase", "Reason", "Ready", "Rollout", "Progress", "Cache-Key", "Age"]
    columns = {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}
    assert columns["Type"] == ".spec.model.type"
    assert columns["Phase"] == ".status.phase"
    assert columns["Ready"] == ".status.readyReplicas"
    assert columns["Cache-Key"] == ".status.engine.cacheKey"
    assert columns["Progress"] == ".status.progress"
    assert columns["Reason"] == '.status.conditions[?(@.type=="Ready")].reason'
    assert columns["Message"] == '.status.conditions[?(@.type=="Ready")].message'
    assert columns["Age"] == ".metadata.creationTimestamp"
    assert columns["TP"] == ".spec.engine.tensorParallelSize"


def test_defaults_and_enums_reach_the_schema() -> None:
    spec = _root_schema()["properties"]["spec"]["properties"]
    engine = spec["engine"]["properties"]
    assert spec["engine"]["default"]["kvCacheDtype"] == "auto"
    assert spec["serving"]["default"]["queue"]["maxQueueSize"] == 0
    assert engine["tensorParallelSize"]["default"] == 1
    assert engine["tensorParallelSize"]["enum"] == [1, 2, 4, 8, 16, 32]
    assert engine["pipelineParallelSize"]["default"] == 1
    assert engine["kvCacheDtype"]["enum"] == ["auto", "fp8"]
    assert spec["model"]["properties"]["type"]["enum"][0] == "blip2"
    serving = spec["serving"]["properties"]
    assert serving["crossKvCacheFraction"]["exclusiveMaximum"] is True
    conditions = _root_schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_yaml_round_trips() -> None:
    assert yaml.safe_load(crdgen.render_yaml()) == crdgen.crd()
