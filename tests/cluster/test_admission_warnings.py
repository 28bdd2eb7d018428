"""Warnings before a GPU hour is lost, on the real API server: the chart's ValidatingAdmissionPolicy makes a
real `kubectl apply` print exactly the warnings `mmctl validate` gives offline, records them in the audit
log and type-checks against the CRD; without the policy, the operator shows the same warnings in the
status and a Warning event, while Ready, kstatus and Argo CD stay healthy and nothing is written at rest.

The policy is installed from the chart (`helm template --show-only`), its binding confined to the test's
namespace (`watchNamespaces`), so no other test of the session sees it.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmd_operator.api.validation import check_spec
from mmd_operator.api.warning_rules import spec_warnings
from mmd_operator.status.report import SPEC_WARNINGS
from mmd_testbed.localcluster.audit import write_requests
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.gitops_check import check
from tests.support.kube import Kube, Resources, Tools
from tools import chart

from .conftest import operator_writes_at_rest

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HEALTH_LUA = ROOT / "gitops" / "argocd" / "health.lua"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
AUDIT_KEY = "validation.policy.admission.k8s.io/validation_failure"


def _example(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    return document


def _trapped() -> dict[str, Any]:
    """qwen2_vl walking into four traps: RWO with 3 replicas, revision main, URLs unrestricted, latest."""
    document = _example("qwen2_vl")
    document["metadata"]["name"] = "trapped"
    document["spec"]["serving"] = {
        "replicas": 3,
        "imageUrlInput": True,
        "image": "registry.example/triton:latest",
    }
    document["spec"]["engineCache"] = {"accessMode": "ReadWriteOnce"}
    return document


def _offline(document: dict[str, Any]) -> list[str]:
    """What `mmctl validate` warns of `document`, with the schema's defaults as the API server has them."""
    spec, problems = check_spec(document["spec"])
    assert spec is not None and problems == []
    return [str(w) for w in spec_warnings(spec.model_dump(by_alias=True, exclude_none=True, mode="json"))]


def _printed(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Warning: ")]


def _apply(tools: Tools, namespace: str, path: Path, *extra: str) -> list[str]:
    applied = tools.run("kubectl", "apply", "--server-side", "-n", namespace, "-f", str(path), *extra)
    assert "serverside-applied" in applied.stdout  # a warning never refuses
    return _printed(applied.stderr)


@pytest.fixture
def policy(kube: Kube, tools: Tools, crd: None, namespace: str, tmp_path: Path) -> Iterator[str]:
    """The chart's warning policy and binding, for `namespace` only; yields the policy's name."""
    release = f"warn-{uuid.uuid4().hex[:6]}"
    rendered = tools.run(
        "helm", "template", release, str(ROOT / chart.CHART_DIR),
        "--show-only", "templates/admission-warnings.yaml", "--set", f"watchNamespaces={{{namespace}}}",
    ).stdout  # fmt: skip
    manifest = tmp_path / "policy.yaml"
    manifest.write_text(rendered)
    tools.run("kubectl", "apply", "--server-side", "-f", str(manifest))
    name = f"{release}-mmd-operator-warnings"
    # The API server takes the new policy into use within a moment; dry-runs pass admission too.
    probe = tmp_path / "probe.yaml"
    probe.write_text(yaml.safe_dump(_trapped()))
    kube.wait_for(
        "the policy to warn",
        lambda: _apply(tools, namespace, probe, "--dry-run=server"),
        timeout=60,
    )
    yield name
    tools.run("kubectl", "delete", "-f", str(manifest), "--wait=true")


def test_kubectl_apply_prints_exactly_the_offline_warnings_and_the_audit_log_records_them(
    kube: Kube, tools: Tools, local_cluster: LocalCluster, namespace: str, policy: str, tmp_path: Path
) -> None:
    document = _trapped()
    expected = _offline(document)
    assert [w.split(":")[0] for w in expected] == [
        "spec.engineCache.accessMode",
        "spec.model.source.huggingface.revision",
        "spec.serving.imageUrlInput",
        "spec.serving.image",
    ]
    path = tmp_path / "trapped.yaml"
    path.write_text(yaml.safe_dump(document))
    started = datetime.now(UTC)
    printed = _apply(tools, namespace, path)
    prefix = f"Warning: Validation failed for ValidatingAdmissionPolicy '{policy}' with binding '{policy}': "
    assert printed == [prefix + warning for warning in expected]
    assert _apply(tools, namespace, path) == printed  # every apply (an update) warns again

    created = [
        event
        for event in write_requests(local_cluster.audit_log, user_agent_prefixes=("kubectl",), since=started)
        if event["objectRef"].get("name") == "trapped" and event["objectRef"].get("namespace") == namespace
    ]
    assert created, "the apply is in the audit log"
    # The API server records the first failed validation of a policy binding in the audit log.
    (failure,) = json.loads(created[0]["annotations"][AUDIT_KEY])
    assert failure["message"] == expected[0] and failure["expressionIndex"] == 0
    assert (failure["policy"], failure["binding"]) == (policy, policy)
    assert failure["validationActions"] == ["Warn", "Audit"]

    # Every expression type-checks against the CRD's schema, once the API server has checked them.
    def checked() -> dict[str, Any] | None:
        live = json.loads(
            tools.run("kubectl", "get", "validatingadmissionpolicy", policy, "-o", "json").stdout
        )
        status: dict[str, Any] = live.get("status", {})
        return status if status.get("observedGeneration") == live["metadata"]["generation"] else None

    status = kube.wait_for("the policy to be type-checked", checked, timeout=60)
    assert "typeChecking" in status and status["typeChecking"].get("expressionWarnings", []) == []


def test_a_clean_resource_applies_silently_and_each_example_warns_as_validate_does(
    tools: Tools, namespace: str, policy: str, tmp_path: Path
) -> None:
    clean = _example("llava")
    clean["metadata"]["name"] = "clean"
    clean["spec"]["model"]["source"]["huggingface"]["revision"] = COMMIT
    path = tmp_path / "clean.yaml"
    path.write_text(yaml.safe_dump(clean))
    assert _offline(clean) == []
    assert _apply(tools, namespace, path) == []

    printed = _apply(tools, namespace, EXAMPLES, "--dry-run=server")
    expected = [
        w
        for example in sorted(EXAMPLES.glob("*.yaml"))
        for w in _offline(yaml.safe_load(example.read_text()))
    ]
    documents = [yaml.safe_load(example.read_text()) for example in sorted(EXAMPLES.glob("*.yaml"))]
    from_the_hub = [d for d in documents if "huggingface" in d["spec"]["model"]["source"]]
    # Every Hub example names a branch, not a commit, so each warns at least once.
    assert len(expected) >= len(from_the_hub) > 0
    # kubectl prints a warning once per run: llava and llava-tp2-fp8 share their repository.
    assert sorted(line.split("': ", 1)[1] for line in printed) == sorted(set(expected))


# -- the operator, where no policy is installed ------------------------------------------------------


@pytest.mark.usefixtures("operator")
def test_the_operator_notes_warnings_in_status_and_an_event_without_holding_ready_back(
    kube: Kube,
    resources: Resources,
    namespace: str,
    local_cluster: LocalCluster,
    gitops_check: Path,
) -> None:
    document = _example("llava")
    document["spec"]["serving"] = {"replicas": 2}
    document["spec"]["engineCache"] = {"accessMode": "ReadWriteOnce"}
    expected = _offline(document)
    assert len(expected) == 2

    resources.apply(document)
    ready = resources.wait_phase("llava", "Ready", timeout=120)
    assert ready["status"]["warnings"] == expected
    assert resources.condition("llava", "Ready")["status"] == "True"
    verdict = check(gitops_check, [ready], HEALTH_LUA)[0]
    assert (verdict.kstatus, verdict.argocd) == ("Current", "Healthy")
    events = kube.events_about(namespace, "llava", SPEC_WARNINGS)
    assert [e.message for e in events] == [f"2 warnings about the spec: {'; '.join(expected)}"]
    writes = operator_writes_at_rest(local_cluster.audit_log, namespace, 5)
    assert writes == [], json.dumps(writes, indent=1)[:3000]

    # One replica: only the revision is left, and an event says so.
    one = copy.deepcopy(document)
    one["spec"]["serving"]["replicas"] = 1
    resources.apply(one)
    kube.wait_for(
        "one warning left",
        lambda: resources.get("llava")["status"].get("warnings") == expected[1:],
        timeout=60,
    )
    kube.wait_for("a second event", lambda: len(_warning_events(kube, namespace)) == 2, timeout=30)
    assert _warning_events(kube, namespace)[-1].message == f"1 warning about the spec: {expected[1]}"

    # Pinned: no warnings at all, and Ready all along.
    one["spec"]["model"]["source"]["huggingface"]["revision"] = COMMIT
    resources.apply(one)
    settled = resources.wait_phase("llava", "Ready", timeout=120)
    assert "warnings" not in settled["status"]


def _warning_events(kube: Kube, namespace: str) -> list[Any]:
    events = kube.core.list_namespaced_event(namespace, field_selector=f"reason={SPEC_WARNINGS}").items
    return sorted(events, key=lambda e: e.metadata.creation_timestamp)
