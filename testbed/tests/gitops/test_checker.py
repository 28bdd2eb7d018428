"""The GitOps checker against the real libraries: kstatus (Flux) and gopher-lua run as Argo CD runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mmd_testbed.localcluster.gitops_check import Verdict, check

# An Argo CD custom health check of the kind a user would put in argocd-cm for our resource.
HEALTH_LUA = """
local hs = {}
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, condition in ipairs(obj.status.conditions) do
    if condition.type == "Stalled" and condition.status == "True" then
      hs.status = "Degraded"
      hs.message = condition.message
      return hs
    end
    if condition.type == "Ready" and condition.status == "True" then
      hs.status = "Healthy"
      hs.message = condition.message
      return hs
    end
  end
end
hs.status = "Progressing"
hs.message = "Waiting for the operator"
return hs
"""


@pytest.fixture
def health_lua(tmp_path: Path) -> Path:
    return _script(tmp_path, HEALTH_LUA)


def _script(directory: Path, text: str) -> Path:
    path = directory / "health.lua"
    path.write_text(text)
    return path


def _deployment(name: str, *, generation: int, observed: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "generation": generation},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
        },
        "status": {
            "observedGeneration": observed,
            "replicas": 2,
            "updatedReplicas": 2,
            "readyReplicas": 2,
            "availableReplicas": 2,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            ],
        },
    }


def _custom(name: str, *conditions: dict[str, str], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "serving.multimodal.dev/v1alpha1",
        "kind": "MultimodalDeployment",
        "metadata": {"name": name, "namespace": "default", "generation": 3, **metadata},
        "spec": {"model": "some-model"},
        "status": {"observedGeneration": 3, "conditions": list(conditions)},
    }


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def test_kstatus_on_deployments(gitops_check: Path, health_lua: Path) -> None:
    verdicts = check(
        gitops_check,
        [
            _deployment("rolled-out", generation=4, observed=4),
            _deployment("behind", generation=5, observed=4),
        ],
        health_lua,
    )

    assert [(v.name, v.kstatus, v.kstatus_message) for v in verdicts] == [
        ("rolled-out", "Current", "Deployment is available. Replicas: 2"),
        ("behind", "InProgress", "Deployment generation is 5, but latest observed generation is 4"),
    ]


def test_custom_resource_conditions(gitops_check: Path, health_lua: Path) -> None:
    objects = [
        _custom("stalled", _condition("Stalled", "True", "EngineBuildFailed", "the engine build failed")),
        _custom("reconciling", _condition("Reconciling", "True", "BuildingEngine", "building the engine")),
        _custom("ready", _condition("Ready", "True", "Serving", "serving 2 replicas")),
    ]

    verdicts = check(gitops_check, objects, health_lua)

    assert verdicts == [
        Verdict("stalled", "Failed", "the engine build failed", "Degraded", "the engine build failed"),
        Verdict(
            "reconciling", "InProgress", "building the engine", "Progressing", "Waiting for the operator"
        ),
        Verdict("ready", "Current", "Resource is Ready", "Healthy", "serving 2 replicas"),
    ]


def test_objects_being_deleted(gitops_check: Path, health_lua: Path) -> None:
    # Both answer before looking at the conditions; Argo CD does not even run the health check.
    deleted = _custom(
        "deleted",
        _condition("Ready", "True", "Serving", "serving"),
        deletionTimestamp="2026-01-01T00:00:00Z",
        finalizers=["serving.multimodal.dev/cleanup"],
    )

    [verdict] = check(gitops_check, [deleted], health_lua)

    assert verdict == Verdict(
        "deleted", "Terminating", "Resource scheduled for deletion", "Progressing", "Pending deletion"
    )


def test_argo_turns_a_status_it_does_not_know_into_unknown(gitops_check: Path, tmp_path: Path) -> None:
    script = _script(tmp_path, 'return {status = "Bogus", message = "looks fine to me"}')

    [verdict] = check(gitops_check, [_custom("bogus")], script)

    assert (verdict.argocd, verdict.argocd_message) == ("Unknown", "Lua returned an invalid health status")


def test_argo_gives_an_empty_health_for_nil_or_an_empty_table(gitops_check: Path, tmp_path: Path) -> None:
    for text in ("return nil", "return {}", "return {status = 1}"):
        [verdict] = check(gitops_check, [_custom("empty")], _script(tmp_path, text))
        assert (verdict.argocd, verdict.argocd_message) == ("", ""), text


def test_a_failing_health_script_is_an_error(gitops_check: Path, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"<string>:1: attempt to index a non-table object\(nil\)"):
        check(gitops_check, [_custom("broken")], _script(tmp_path, "return obj.nothing.here"))
    with pytest.raises(RuntimeError, match="expect table output from Lua script, not string"):
        check(gitops_check, [_custom("broken")], _script(tmp_path, 'return "Healthy"'))


def test_argo_lua_libraries(gitops_check: Path, tmp_path: Path) -> None:
    # Custom checks get package, base and table; the safe os (time and date) only through require.
    script = _script(
        tmp_path,
        'local safe = require("os")\n'
        "local seen = {type(os), type(string), type(safe.time), type(safe.date), type(safe.exit)}\n"
        'return {status = "Healthy", message = table.concat(seen, " ") .. " " .. safe.date("!%Y", 0)}',
    )

    [closed] = check(gitops_check, [_custom("libs")], script)
    [opened] = check(gitops_check, [_custom("libs")], script, open_libs=True)

    assert closed.argocd_message == "nil nil function function nil 1970"
    assert opened.argocd_message == "table table function function nil 1970"
