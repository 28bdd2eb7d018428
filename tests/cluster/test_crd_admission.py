"""The generated CRD on the real API server: accepted, every example admitted, and its CEL rules refuse
exactly what `mmctl validate` refuses offline, with the same field paths and messages."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from mmd_operator.api import v1alpha1
from mmd_operator.api.validation import InvalidSpecError, check_resource
from mmd_operator.plan.resource_plan import plan_resource
from tests.support.invalid_specs import CASES, resource
from tests.support.kube import Tools

pytestmark = pytest.mark.cluster

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


def _stage(base: str, patch: dict[str, Any], path: str, fragment: str) -> str:
    """Which check refuses a case offline: the envelope, the schema, a CEL rule, or only the derivation."""
    if path in {"apiVersion", "kind", "metadata.name"}:
        return "envelope"
    parsed, problems = check_resource(resource(base, patch))
    if parsed is None:
        return "schema"
    hit = any(str(p).startswith(f"{path}: ") and fragment in str(p) for p in problems)
    return "cel" if hit else "derivation"


_BY_STAGE: dict[str, list[tuple[str, str, dict[str, Any], str, str]]] = {
    "envelope": [],
    "schema": [],
    "cel": [],
    "derivation": [],
}
for _case in CASES:
    _BY_STAGE[_stage(*_case[1:])].append(_case)


@pytest.fixture
def crd_installed(crd: None) -> None:
    """The generated CRD (session fixture `crd`)."""


def _create(api_client: k8s.ApiClient, namespace: str, document: dict[str, Any], *, dry_run: bool) -> Any:
    return k8s.CustomObjectsApi(api_client).create_namespaced_custom_object(
        v1alpha1.GROUP,
        v1alpha1.VERSION,
        namespace,
        v1alpha1.PLURAL,
        document,
        dry_run="All" if dry_run else None,
    )


@pytest.mark.usefixtures("crd_installed")
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_is_admitted_with_defaults_filled_in(
    api_client: k8s.ApiClient, namespace: str, example: Path
) -> None:
    document = yaml.safe_load(example.read_text())
    created = _create(api_client, namespace, document, dry_run=False)
    engine, serving = created["spec"]["engine"], created["spec"]["serving"]
    assert engine["kvCacheDtype"] in {"auto", "fp8"}
    assert serving["queue"]["preprocessingMaxQueueDelayMicroseconds"] == 20000
    # What the API server stored is what the operator will read: it must validate offline too.
    stored, problems = check_resource(created)
    assert problems == [] and stored is not None


def test_most_refusals_happen_at_admission() -> None:
    assert len(_BY_STAGE["cel"]) >= 20
    assert len(_BY_STAGE["schema"]) >= 10
    assert len(_BY_STAGE["envelope"]) == 3


def _causes(error: ApiException) -> list[tuple[str, str]]:
    assert error.status == 422, error.body
    body = yaml.safe_load(error.body)
    return [(c.get("field", ""), c.get("message", "")) for c in body["details"]["causes"]]


def _ids(cases: list[tuple[str, str, dict[str, Any], str, str]]) -> list[str]:
    return [case[0] for case in cases]


def _arguments(cases: list[tuple[str, str, dict[str, Any], str, str]]) -> list[tuple[Any, ...]]:
    return [case[1:] for case in cases]


@pytest.mark.usefixtures("crd_installed")
@pytest.mark.parametrize(
    ("base", "patch", "path", "fragment"), _arguments(_BY_STAGE["cel"]), ids=_ids(_BY_STAGE["cel"])
)
def test_cel_rules_refuse_with_the_same_path_and_message(
    api_client: k8s.ApiClient, namespace: str, base: str, patch: dict[str, Any], path: str, fragment: str
) -> None:
    with pytest.raises(ApiException) as refused:
        _create(api_client, namespace, resource(base, patch), dry_run=True)
    causes = _causes(refused.value)
    assert any(field == path and fragment in message for field, message in causes), causes


@pytest.mark.usefixtures("crd_installed")
@pytest.mark.parametrize(
    ("base", "patch", "path", "fragment"), _arguments(_BY_STAGE["schema"]), ids=_ids(_BY_STAGE["schema"])
)
def test_schema_refuses_at_the_same_path(
    api_client: k8s.ApiClient, namespace: str, base: str, patch: dict[str, Any], path: str, fragment: str
) -> None:
    document = resource(base, patch)
    try:
        _create(api_client, namespace, document, dry_run=True)
    except ApiException as refused:
        fields = [field for field, _ in _causes(refused)]
        assert any(
            field == path or field.startswith(f"{path}.") or path.startswith(field) for field in fields
        )
    else:
        # Unknown fields are pruned, not refused, by the API server; kubectl's strict field validation
        # (and `mmctl validate`) report them. Nothing else may pass.
        assert fragment == "unknown field", f"{path} was admitted"


@pytest.mark.usefixtures("crd_installed")
@pytest.mark.parametrize(
    ("base", "patch", "path", "fragment"), _arguments(_BY_STAGE["envelope"]), ids=_ids(_BY_STAGE["envelope"])
)
def test_a_wrong_envelope_is_refused(
    api_client: k8s.ApiClient, namespace: str, base: str, patch: dict[str, Any], path: str, fragment: str
) -> None:
    with pytest.raises(ApiException) as refused:
        _create(api_client, namespace, resource(base, patch), dry_run=True)
    assert refused.value.status in {400, 422}


@pytest.mark.usefixtures("crd_installed")
@pytest.mark.parametrize(
    ("base", "patch", "path", "fragment"),
    _arguments(_BY_STAGE["derivation"]),
    ids=_ids(_BY_STAGE["derivation"]),
)
def test_derivation_only_problems_pass_admission_and_the_plan_refuses_what_was_stored(
    api_client: k8s.ApiClient, namespace: str, base: str, patch: dict[str, Any], path: str, fragment: str
) -> None:
    # CEL cannot know model-type defaults or multiply out derived limits, so the API server admits these.
    # The object it would store (defaults filled in) must still be refused by the plan every consumer
    # derives (`mmctl validate` offline, the operator's reconcile), at the same path.
    stored = _create(api_client, namespace, resource(base, patch), dry_run=True)
    assert stored["metadata"]["name"] == "test" and stored["spec"]["model"]["type"] == base
    with pytest.raises(InvalidSpecError) as refused:
        plan_resource(stored)
    assert any(p.path == path and fragment in p.message for p in refused.value.problems), refused.value


@pytest.mark.usefixtures("crd_installed")
def test_kubectl_explain_documents_the_fields(tools: Tools) -> None:
    deadline = time.monotonic() + 30
    while True:
        explained = tools.run("kubectl", "explain", "mmd.spec.engine.maxMultimodalLen", check=False)
        if explained.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert explained.returncode == 0, explained.stderr
    assert "features per image" in explained.stdout


@pytest.mark.usefixtures("crd_installed")
def test_printer_columns_show_type_phase_reason_ready_cache_key_and_age(tools: Tools, namespace: str) -> None:
    tools.run(
        "kubectl",
        "apply",
        "--server-side",
        "-n",
        namespace,
        "-f",
        str(EXAMPLES[0].parent / "llava-tp2-fp8.yaml"),
    )
    listing = tools.run("kubectl", "get", "mmd", "-n", namespace).stdout.splitlines()
    assert listing[0].split() == ["NAME", "TYPE", "PHASE", "REASON", "READY", "CACHE-KEY", "AGE"]
    assert listing[1].split()[:2] == ["llava-tp2-fp8", "llava"]
    header = ["NAME", "TYPE", "PHASE", "REASON", "READY", "REPLICAS", "TP", "CACHE-KEY", "AGE", "MESSAGE"]
    # A Ready condition as an operator writes one, through the status subresource, in case no operator
    # runs in this session; one that does may replace it with its own.
    condition = {
        "type": "Ready",
        "status": "False",
        "reason": "InsufficientGPUs",
        "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    status = {"status": {"phase": "Degraded", "conditions": [condition]}}
    tools.run(
        "kubectl", "patch", "mmd", "llava-tp2-fp8", "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip

    def columns_match_the_ready_condition() -> bool:
        # The operator of this session may be changing the status: read until a listing and the object agree.
        wide = tools.run("kubectl", "get", "mmd", "-n", namespace, "-o", "wide").stdout.splitlines()
        assert wide[0].split() == header
        found = json.loads(
            tools.run("kubectl", "get", "mmd", "llava-tp2-fp8", "-n", namespace, "-o", "json").stdout
        )
        conditions = (found.get("status") or {}).get("conditions") or []
        ready = next((c for c in conditions if c["type"] == "Ready"), None)
        return (
            ready is not None
            and wide[1].split()[:4] == ["llava-tp2-fp8", "llava", found["status"]["phase"], ready["reason"]]
            and wide[1].endswith(ready["message"])
        )

    deadline = time.monotonic() + 60
    while not columns_match_the_ready_condition():
        assert time.monotonic() < deadline, "REASON and MESSAGE never showed the Ready condition"
        time.sleep(1)
