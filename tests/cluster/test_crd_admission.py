"""The generated CRD on the real API server: accepted, every example admitted and stored with no empty map or
list, and its CEL rules refuse exactly what `mmctl validate` refuses offline, with the same field paths,
messages and values."""

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
from mmd_operator.api.validation import InvalidSpecError, check_resource, check_spec, stored_spec
from mmd_operator.plan.resource_plan import plan_resource
from tests.support.invalid_specs import CASES, InvalidSpec, resource
from tests.support.kube import Tools

pytestmark = pytest.mark.cluster

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


def _stage(case: InvalidSpec) -> str:
    """Which check refuses a case offline: the envelope, the schema, a CEL rule, or only the derivation."""
    if case.path in {"apiVersion", "kind", "metadata.name"}:
        return "envelope"
    parsed, problems = check_resource(resource(case.base, case.patch))
    if parsed is None:
        return "schema"
    hit = any(str(p).startswith(f"{case.path}: ") and case.fragment in str(p) for p in problems)
    return "cel" if hit else "derivation"


_BY_STAGE: dict[str, list[InvalidSpec]] = {"envelope": [], "schema": [], "cel": [], "derivation": []}
for _case in CASES:
    _BY_STAGE[_stage(_case)].append(_case)


def _empty_containers(value: Any, path: str = "spec") -> list[str]:
    """Paths of the empty maps and lists in `value`."""
    if isinstance(value, dict):
        found = [path] if not value else []
        return found + [p for key, item in value.items() for p in _empty_containers(item, f"{path}.{key}")]
    if isinstance(value, list):
        found = [path] if not value else []
        return found + [p for i, item in enumerate(value) for p in _empty_containers(item, f"{path}[{i}]")]
    return []


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
    # Defaulting adds no empty map or list (`kubectl describe` shows what was written and what matters),
    # and offline validation judges the very object the API server stores.
    assert _empty_containers(created["spec"]) == []
    assert created["spec"] == stored_spec(document["spec"])
    # What the API server stored is what the operator will read: it must validate offline too, and plan
    # the same engine (cacheKey) and objects as the file itself.
    stored, problems = check_resource(created)
    assert problems == [] and stored is not None
    _, stored_plan = plan_resource(created)
    _, file_plan = plan_resource(document)
    assert stored_plan.cache_key == file_plan.cache_key
    assert stored_plan.files() == file_plan.files()


@pytest.mark.usefixtures("crd_installed")
def test_a_minimal_resource_is_stored_with_what_was_written_and_meaningful_defaults_only(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    document = resource("llava")
    _create(api_client, namespace, document, dry_run=False)
    stored = k8s.CustomObjectsApi(api_client).get_namespaced_custom_object(
        v1alpha1.GROUP, v1alpha1.VERSION, namespace, v1alpha1.PLURAL, "test"
    )
    spec = stored["spec"]
    assert _empty_containers(spec) == []
    assert spec == stored_spec(document["spec"])
    assert spec["model"]["source"]["huggingface"] == {"repo": "llava-hf/llava-1.5-7b-hf", "revision": "main"}
    # The sections with something to say are there; those that would only hold empty maps are not.
    assert set(spec) == {"model", "engine", "serving", "build", "engineCache"}
    assert "pod" not in spec["serving"] and "pod" not in spec["build"] and "vision" not in spec["engine"]
    assert "loraCache" not in spec["serving"]
    assert spec["engineCache"] == {"retention": "Retain"}
    assert plan_resource(stored)[1].cache_key == plan_resource(document)[1].cache_key


@pytest.mark.usefixtures("crd_installed")
@pytest.mark.parametrize(
    ("pod", "refused"),
    [
        ({"resources": {"limits": {"memory": "64Gi"}}}, None),
        ({"resources": {"requests": {"cpu": "8"}}}, None),
        (
            {"resources": {"limits": {v1alpha1.GPU_RESOURCE: 2}}},
            f"{v1alpha1.GPU_RESOURCE} (2) is set by the operator",
        ),
        ({"tolerations": [{"key": "gpu", "operator": "Exists"}]}, None),
        ({"nodeSelector": {"pool": "gpu"}}, None),
    ],
    ids=["limits-only", "requests-only", "gpu-limit", "tolerations-only", "node-selector-only"],
)
def test_rules_hold_on_sections_written_in_part(
    api_client: k8s.ApiClient, namespace: str, pod: dict[str, Any], refused: str | None
) -> None:
    # Rules that read a map the user may leave out guard it with has(): a section written in part is judged
    # on what it says.
    document = resource("llava", {"spec": {"serving": {"pod": pod}}})
    _, offline = check_spec(document["spec"])
    if refused is None:
        _create(api_client, namespace, document, dry_run=True)
        assert offline == []
        return
    with pytest.raises(ApiException) as error:
        _create(api_client, namespace, document, dry_run=True)
    causes = _causes(error.value)
    assert [field for field, _ in causes] == ["spec.serving.pod.resources"], causes
    assert [p.path for p in offline] == ["spec.serving.pod.resources"]
    assert refused in causes[0][1] and refused in offline[0].message


def _server_side_apply(api_client: k8s.ApiClient, namespace: str, document: dict[str, Any]) -> dict[str, Any]:
    custom = k8s.CustomObjectsApi(api_client)
    custom.patch_namespaced_custom_object(
        v1alpha1.GROUP, v1alpha1.VERSION, namespace, v1alpha1.PLURAL, document["metadata"]["name"], document,
        field_manager="kubectl", force=True, _content_type="application/apply-patch+yaml",
    )  # fmt: skip
    stored: dict[str, Any] = custom.get_namespaced_custom_object(
        v1alpha1.GROUP, v1alpha1.VERSION, namespace, v1alpha1.PLURAL, document["metadata"]["name"]
    )
    return stored


@pytest.mark.usefixtures("crd_installed")
@pytest.mark.parametrize("emptied", [{}, None], ids=["empty", "null"])
def test_sections_emptied_in_a_server_side_applied_file_are_admitted(
    api_client: k8s.ApiClient, namespace: str, emptied: dict[str, Any] | None
) -> None:
    # Server-side apply turns a section emptied in the file into null (kubernetes/kubernetes#104694); the
    # optional sections accept null, which reads as absent, where a default used to stand in for it.
    pod = {"annotations": {"a": "b"}, "nodeSelector": {"pool": "gpu"}, "resources": {"limits": {"cpu": 8}}}
    written = resource("vila", {"spec": {"engine": {"vision": {"maxBatchSize": 8}}, "serving": {"pod": pod}}})
    _server_side_apply(api_client, namespace, written)
    for section in ({"serving": {"pod": {**pod, "nodeSelector": emptied, "resources": emptied}}}, {
        "serving": {"pod": emptied}, "engine": {"vision": emptied}
    }):  # fmt: skip
        applied = resource("vila", {"spec": section})
        stored = _server_side_apply(api_client, namespace, applied)
        # Nothing empty but what the file itself says.
        assert set(_empty_containers(stored["spec"])) <= set(_empty_containers(applied["spec"]))
        assert check_resource(stored)[1] == []
        assert plan_resource(stored)[1].cache_key == plan_resource(resource("vila"))[1].cache_key


# Strings the API server's `isQuantity` and the offline stand-in must judge alike.
QUANTITY_SAMPLES = (
    "500Gi", "500GB", "500gi", "1.5Gi", ".5", "5.", "1e3", "1E3", "1E", "1e-3", "-1Gi", "+2", "2 Gi", "Gi",
    "", "0x10", "1.5.5", "100m", "1u", "1n", "1k", "1K", "1Ki", "1P", "1Ei", "1Mi ", "1_000", "12e", "1e+6",
    "+", ".", "-.5Mi", "1.G", "1e1.5", "1ke3", "1iK", "5e-", "0", "007", "1.0e+2",
)  # fmt: skip


@pytest.mark.usefixtures("crd_installed")
def test_quantities_are_judged_offline_as_the_api_server_judges_them(
    api_client: k8s.ApiClient, namespace: str
) -> None:
    differ = []
    for sample in QUANTITY_SAMPLES:
        document = resource("llava", {"spec": {"engineCache": {"size": sample}}})
        try:
            _create(api_client, namespace, document, dry_run=True)
            server = "admitted"
        except ApiException as error:
            words = f'Forbidden: "{sample}" is not a Kubernetes quantity; {v1alpha1.QUANTITY_HINT}'
            assert _causes(error) == [("spec.engineCache.size", words)]
            server = "refused"
        _, problems = check_spec(document["spec"])
        offline = "refused" if problems else "admitted"
        if server != offline:
            differ.append(f"{sample!r}: API server {server}, offline {offline}")
    assert differ == []


def test_most_refusals_happen_at_admission() -> None:
    assert len(_BY_STAGE["cel"]) >= 20
    assert len(_BY_STAGE["schema"]) >= 10
    assert len(_BY_STAGE["envelope"]) == 3


def _causes(error: ApiException) -> list[tuple[str, str]]:
    assert error.status == 422, error.body
    body = yaml.safe_load(error.body)
    return [(c.get("field", ""), c.get("message", "")) for c in body["details"]["causes"]]


def _ids(cases: list[InvalidSpec]) -> list[str]:
    return [case.id for case in cases]


@pytest.mark.usefixtures("crd_installed")
@pytest.mark.parametrize("case", _BY_STAGE["cel"], ids=_ids(_BY_STAGE["cel"]))
def test_cel_rules_refuse_with_the_same_path_message_and_values(
    api_client: k8s.ApiClient, namespace: str, case: InvalidSpec
) -> None:
    with pytest.raises(ApiException) as refused:
        _create(api_client, namespace, resource(case.base, case.patch), dry_run=True)
    causes = _causes(refused.value)
    assert any(
        field == case.path and case.fragment in message and all(v in message for v in case.values)
        for field, message in causes
    ), causes
    # The rule's own words, not the type of the node it sits on.
    assert not any('Invalid value: "object"' in message for _, message in causes), causes


@pytest.mark.usefixtures("crd_installed")
@pytest.mark.parametrize("case", _BY_STAGE["schema"], ids=_ids(_BY_STAGE["schema"]))
def test_schema_refuses_at_the_same_path_with_the_values(
    api_client: k8s.ApiClient, namespace: str, case: InvalidSpec
) -> None:
    document = resource(case.base, case.patch)
    try:
        _create(api_client, namespace, document, dry_run=True)
    except ApiException as refused:
        causes = _causes(refused)
        assert any(
            (field == case.path or field.startswith(f"{case.path}.") or case.path.startswith(field))
            and all(v in message for v in case.values)
            for field, message in causes
        ), causes
    else:
        # Unknown fields are pruned, not refused, by the API server; kubectl's strict field validation
        # (and `mmctl validate`) report them. Nothing else may pass.
        assert case.fragment.startswith("unknown field"), f"{case.path} was admitted"


@pytest.mark.usefixtures("crd_installed")
@pytest.mark.parametrize("case", _BY_STAGE["envelope"], ids=_ids(_BY_STAGE["envelope"]))
def test_a_wrong_envelope_is_refused(api_client: k8s.ApiClient, namespace: str, case: InvalidSpec) -> None:
    with pytest.raises(ApiException) as refused:
        _create(api_client, namespace, resource(case.base, case.patch), dry_run=True)
    assert refused.value.status in {400, 422}


@pytest.mark.usefixtures("crd_installed")
@pytest.mark.parametrize("case", _BY_STAGE["derivation"], ids=_ids(_BY_STAGE["derivation"]))
def test_derivation_only_problems_pass_admission_and_the_plan_refuses_what_was_stored(
    api_client: k8s.ApiClient, namespace: str, case: InvalidSpec
) -> None:
    # CEL cannot know model-type defaults or multiply out derived limits, so the API server admits these.
    # The object it would store (defaults filled in) must still be refused by the plan every consumer
    # derives (`mmctl validate` offline, the operator's reconcile), at the same path.
    stored = _create(api_client, namespace, resource(case.base, case.patch), dry_run=True)
    assert stored["metadata"]["name"] == "test" and stored["spec"]["model"]["type"] == case.base
    with pytest.raises(InvalidSpecError) as refused:
        plan_resource(stored)
    assert any(
        p.path == case.path and case.fragment in p.message and all(v in p.message for v in case.values)
        for p in refused.value.problems
    ), refused.value


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
def test_printer_columns_show_type_phase_reason_ready_rollout_cache_key_and_age(
    tools: Tools, namespace: str
) -> None:
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
    assert listing[0].split() == [
        "NAME", "TYPE", "PHASE", "REASON", "READY", "ROLLOUT", "PROGRESS", "CACHE-KEY", "AGE",
    ]  # fmt: skip
    assert listing[1].split()[:2] == ["llava-tp2-fp8", "llava"]
    header = [
        "NAME", "TYPE", "PHASE", "REASON", "READY", "ROLLOUT", "PROGRESS", "REPLICAS", "TP", "PODS/REPLICA",
        "RUNTIME", "COMMIT", "GPU", "TRT-LLM", "CACHE-KEY", "AGE", "MESSAGE",
    ]  # fmt: skip
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
