"""The privilege check's table and its CEL: every pod setting decided, every field where the CRD has it,
and a field counted as given only when a create sets it or an update changes it.

The authorizer's answers are the API server's own (`tests/cluster/test_permissions.py`); here cel-python
evaluates what is pure: whether a request sets or changes each field.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from celpy.adapter import json_to_cel

from mmd_operator.api import crdgen
from mmd_operator.api.v1alpha1.pods import PodSettings
from mmd_operator.api.validation import cel_program
from mmd_operator.config import DEFAULT_CLAIM
from tools import privilege_check
from tools.privilege_check import POWERS

ROOT = Path(__file__).resolve().parents[3]
LLAVA = yaml.safe_load((ROOT / "examples" / "llava.yaml").read_text())


def _schema_at(path: str) -> dict[str, Any]:
    node: dict[str, Any] = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for step in path.split("."):
        node = node["properties"][step]
    return node


def test_every_pod_setting_is_checked_or_said_to_give_nothing() -> None:
    fields = {field.alias or name for name, field in PodSettings.model_fields.items()}
    checked = {power.path.rsplit(".", 1)[1] for power in POWERS if ".pod." in power.path}
    assert checked | set(privilege_check.NOT_CHECKED) == fields
    assert not checked & set(privilege_check.NOT_CHECKED)
    for role in ("build", "serving"):
        assert {p.path for p in POWERS if p.path.startswith(f"spec.{role}.pod.")} == {
            f"spec.{role}.pod.{name}" for name in checked
        }


@pytest.mark.parametrize("power", POWERS, ids=lambda power: power.id)
def test_each_field_is_where_the_crd_has_it_and_has_no_default(power: privilege_check.PodPower) -> None:
    schema = _schema_at(power.path)
    assert "default" not in schema  # else every create would set it
    kinds = {
        "imagePullSecrets": "array",
        "labels": "object",
        "annotations": "object",
        "resourceClaim": "object",
    }
    expected = kinds.get(
        power.path.rsplit(".", 1)[1], "object" if power.path.endswith(("Ref", "Policy")) else "string"
    )
    assert schema["type"] == expected


def _gained(resource: dict[str, Any], old: dict[str, Any] | None) -> set[str]:
    """What a create (`old` None) or an update of `old` to `resource` gives the pods, by power.

    cel-python compares no map with null: each case is evaluated as the policy's `gained` reads once
    `oldObject != null` is decided (a create: `present`; an update: `present && !kept`). The API server
    evaluates the whole (`tests/cluster/test_permissions.py`).
    """
    activation = {"object": json_to_cel(resource)}
    if old is not None:
        activation["oldObject"] = json_to_cel(old)
    found = set()
    for power in POWERS:
        assert privilege_check.gained(power) == (
            f"{privilege_check.present(power)} && !(oldObject != null && {privilege_check.kept(power)})"
        )
        expression = privilege_check.present(power)
        if old is not None:
            expression = f"{expression} && !({privilege_check.kept(power)})"
        if cel_program(expression.replace("@default-claim@", DEFAULT_CLAIM)).evaluate(activation):
            found.add(power.id)
    return found


def _with(path: str, value: Any, document: dict[str, Any] = LLAVA) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    node = changed
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return changed


def test_a_create_counts_the_fields_it_sets_and_no_other() -> None:
    assert _gained(LLAVA, None) == set()
    assert _gained(_with("spec.serving.pod.serviceAccountName", "gpu-admin"), None) == {
        "servingServiceAccount"
    }
    assert _gained(_with("spec.build.pod.serviceAccountName", "builder"), None) == {"buildServiceAccount"}
    # Empty lists and maps, as a spec may spell its defaults, give nothing.
    assert _gained(_with("spec.serving.pod.labels", {}), None) == set()
    assert _gained(_with("spec.serving.pod.imagePullSecrets", []), None) == set()
    assert _gained(_with("spec.serving.pod.labels", {"app": "payments"}), None) == {"servingLabels"}
    assert _gained(_with("spec.build.pod.annotations", {"iam.amazonaws.com/role": "x"}), None) == {
        "buildAnnotations"
    }
    # The shared engine cache is everyone's; another claim is its owner's.
    assert _gained(_with("spec.engineCache.claimName", DEFAULT_CLAIM), None) == set()
    assert _gained(_with("spec.engineCache.claimName", "team-data"), None) == {"engineCacheClaim"}
    assert _gained(_with("spec.serving.networkPolicy", {}), None) == {"networkPolicy"}
    gated = yaml.safe_load((ROOT / "examples" / "mllama.yaml").read_text())
    assert _gained(gated, None) == {"tokenSecret"}


def test_an_update_counts_only_what_it_changes() -> None:
    given = _with("spec.serving.pod.serviceAccountName", "gpu-admin")
    other_field = _with("spec.serving.replicas", 3, given)
    assert _gained(other_field, given) == set()
    assert _gained(_with("spec.serving.pod.serviceAccountName", "other", given), given) == {
        "servingServiceAccount"
    }
    assert _gained(_with("spec.serving.pod.serviceAccountName", "gpu-admin"), LLAVA) == {
        "servingServiceAccount"
    }
    removed = copy.deepcopy(given)
    del removed["spec"]["serving"]["pod"]["serviceAccountName"]
    assert _gained(removed, given) == set()  # back to the namespace's default account
    labelled = _with("spec.serving.pod.labels", {"a": "b"})
    assert _gained(_with("spec.serving.pod.labels", {"a": "b", "c": "d"}, labelled), labelled) == {
        "servingLabels"
    }


def test_each_message_names_the_field_the_user_and_the_permission() -> None:
    for power in POWERS:
        message = privilege_check.message(power)
        assert message.startswith(f"'{power.path}: ' + ")
        assert "request.userInfo.username" in message and "request.namespace" in message
        cel_program(message)  # it compiles
    spec = privilege_check.policy_spec()
    assert spec["validations"][0]["expression"] == "!variables.buildServiceAccount || variables.mayCreatePods"
    token = next(v for v in spec["validations"] if "tokenSecret" in v["expression"])
    assert (
        token["expression"]
        == "!variables.tokenSecret || variables.mayCreatePods || variables.mayReadTokenSecret"
    )
