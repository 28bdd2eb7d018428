"""The bad-input catalogue against the real API server with the real operator running.

Every case of `tests/support/bad_inputs.py` is sent at once into one namespace: what the API server must
refuse is refused with a message naming the field; what it admits is reported by the operator (Failed,
with InvalidSpec or the missing reference's reason, or the scheduler's InsufficientGPUs) with a message
naming the field; nothing but the unschedulable case's pending build gets a child object. Then every fix
is applied, and every fixed resource must converge to Ready for its generation.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from mmd_operator.api import v1alpha1
from mmd_operator.vocabulary import labels
from mmd_testbed.localcluster.objects import NodePool
from tests.support.bad_inputs import (
    AT_ADMISSION,
    CASES,
    INVALID,
    LORA_CLAIM,
    MISSING,
    REFUSED,
    SMALL_NODE_TAINT,
    UNSCHEDULABLE,
    UPDATE,
    YAML,
    BadInput,
    claim,
)
from tests.support.kube import Kube, Resources, Tools
from tests.support.nodes import extra_gpu_nodes

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

# Every fixed case serves one pod with one GPU (two for the TP case), about 90 GPUs in all: the session's
# 4 x 8 are not enough, and pods of this worker's earlier tests may hold some while their namespaces go
# (deleted in the background), so this test adds 12 more such nodes (room for the fixes with a third to
# spare), and one node of 2 GPUs that a TP 4 pod cannot fit on. Only the tensor-parallel case may use the
# small node (it tolerates its taint), so no other pod takes its GPUs.
MORE_NODES = (
    NodePool(count=12, name_prefix="bad-input-gpu"),
    NodePool(count=1, gpus_per_node=2, name_prefix="bad-input-small"),
)


@pytest.fixture
def more_gpu_nodes(kube: Kube) -> Iterator[None]:
    small_taint = {"key": SMALL_NODE_TAINT, "value": "true", "effect": "NoSchedule"}
    with contextlib.ExitStack() as nodes:
        for pool in MORE_NODES:
            taints = (small_taint,) if pool.gpus_per_node < 8 else ()
            nodes.enter_context(extra_gpu_nodes(kube, pool, taints=taints))
        yield


def _create(kube: Kube, namespace: str, manifest: dict[str, Any]) -> None:
    kind = manifest["kind"]
    if kind == "Secret":
        kube.core.create_namespaced_secret(namespace, manifest)
    elif kind == "PersistentVolumeClaim":
        kube.core.create_namespaced_persistent_volume_claim(namespace, manifest)
    else:
        raise AssertionError(kind)


def _refusal(error: ApiException) -> list[str]:
    """The API server's causes, one `field: message` each, as kubectl prints them."""
    body = yaml.safe_load(error.body) if error.body else {}
    causes = (body.get("details") or {}).get("causes") or []
    return [f"{c.get('field')}: {c.get('message')}" for c in causes] or [str(body.get("message", ""))]


def _names_the_field(case: BadInput, causes: list[str]) -> bool:
    """Whether one cause is at the case's field, in its words, with its values."""
    return any(
        cause.startswith(f"{case.path}: ")
        and case.server_fragment in cause
        and all(value in cause for value in case.values)
        for cause in causes
    )


def _status_matches(case: BadInput, body: dict[str, Any]) -> str | None:
    """None when `body` reports `case` as it must; otherwise what it shows instead."""
    status = body.get("status") or {}
    ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
    seen = f"phase {status.get('phase')}, Ready {ready.get('reason')}: {ready.get('message')}"
    if status.get("observedGeneration") != body["metadata"]["generation"]:
        return f"not observed yet ({seen})"
    phase_ok = status.get("phase") == "Failed" if case.outcome in {INVALID, MISSING} else True
    message = str(ready.get("message", ""))
    named = case.path in message and case.fragment in message and all(v in message for v in case.values)
    return None if phase_ok and ready.get("reason") == case.reason and named else seen


def _children(kube: Kube, namespace: str) -> dict[str, list[Any]]:
    return {
        "ConfigMap": kube.core.list_namespaced_config_map(namespace).items,
        "Job": kube.batch.list_namespaced_job(namespace).items,
        "Deployment": kube.apps.list_namespaced_deployment(namespace).items,
        "Service": kube.core.list_namespaced_service(namespace).items,
        "PersistentVolumeClaim": kube.core.list_namespaced_persistent_volume_claim(namespace).items,
    }


def _children_of(children: dict[str, list[Any]], name: str, uid: str | None) -> list[str]:
    found = []
    for kind, objects in children.items():
        for obj in objects:
            owned = any(
                ref.kind == v1alpha1.KIND and (ref.name == name or ref.uid == uid)
                for ref in obj.metadata.owner_references or []
            )
            if owned or (obj.metadata.labels or {}).get(labels.INSTANCE) == name:
                found.append(f"{kind}/{obj.metadata.name}")
    return found


def _ready(body: dict[str, Any]) -> bool:
    status = body.get("status") or {}
    ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
    return (
        status.get("observedGeneration") == body["metadata"]["generation"]
        and status.get("phase") == "Ready"
        and ready.get("status") == "True"
    )


def _brief(status: dict[str, Any] | None) -> str:
    """A status in one short line: phase and the Ready condition's reason and message."""
    if not status:
        return "no status"
    ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
    return f"{status.get('phase')}, {ready.get('reason')}: {str(ready.get('message', ''))[:160]}"


def _kubectl_apply(tools: Tools, namespace: str, path: Path, text: str) -> Any:
    path.write_text(text)
    return tools.run(
        "kubectl",
        "apply",
        "--server-side",
        "--field-manager=kubectl",
        "-n",
        namespace,
        "-f",
        str(path),
        check=False,
    )


@pytest.mark.usefixtures("more_gpu_nodes")
def test_every_bad_input_is_refused_or_reported_creates_nothing_and_its_fix_converges(
    kube: Kube,
    resources: Resources,
    namespace: str,
    tools: Tools,
    tmp_path: Path,
    say: Callable[[str], None],
) -> None:
    started = time.monotonic()
    custom = resources.custom

    def listed() -> dict[str, dict[str, Any]]:
        items = custom.list_namespaced_custom_object(
            v1alpha1.GROUP, v1alpha1.VERSION, namespace, v1alpha1.PLURAL
        )
        return {item["metadata"]["name"]: item for item in items["items"]}

    _create(kube, namespace, claim(LORA_CLAIM))
    for case in CASES:
        for manifest in case.given:
            _create(kube, namespace, manifest)
    # The resources an UPDATE case changes exist (valid) first.
    for case in CASES:
        if case.outcome == UPDATE:
            resources.apply(case.document)

    # -- send every bad input --
    wrong: list[str] = []
    for case in CASES:
        if case.outcome == REFUSED:
            try:
                custom.create_namespaced_custom_object(
                    v1alpha1.GROUP,
                    v1alpha1.VERSION,
                    namespace,
                    v1alpha1.PLURAL,
                    {**case.document, "metadata": {**case.document["metadata"], "namespace": namespace}},
                )
            except ApiException as error:
                text = _refusal(error)
                if error.status != 422 or not _names_the_field(case, text):
                    wrong.append(f"{case.id}: refused with {error.status} but {text!r}")
            else:
                wrong.append(f"{case.id}: admitted")
        elif case.outcome == YAML:
            assert case.yaml_text is not None
            result = _kubectl_apply(tools, namespace, tmp_path / f"{case.id}.yaml", case.yaml_text)
            # kubectl prints `... is invalid: <field>: <message>`, several as `[<field>: ..., <field>: ...]`.
            causes = [f"{case.path}: {part}" for part in result.stderr.split(f"{case.path}: ")[1:]]
            if result.returncode == 0 or not _names_the_field(case, causes):
                wrong.append(f"{case.id}: kubectl exited {result.returncode}: {result.stderr.strip()!r}")
        elif case.outcome == UPDATE:
            try:
                resources.apply(case.updated)
            except ApiException as error:
                text = _refusal(error)
                if error.status != 422 or not _names_the_field(case, text):
                    wrong.append(f"{case.id}: refused with {error.status} but {text!r}")
            else:
                wrong.append(f"{case.id}: the update was admitted")
        else:
            resources.apply(case.document)
    assert not wrong, "\n".join(wrong)

    # Nothing refused was stored; the updated resources kept their model type.
    stored = listed()
    refused = [case for case in CASES if case.outcome in {REFUSED, YAML}]
    assert not [case.name for case in refused if case.name in stored]
    for case in CASES:
        if case.outcome == UPDATE:
            assert stored[case.name]["spec"]["model"]["type"] == case.document["spec"]["model"]["type"]

    # -- the operator reports each admitted one precisely --
    admitted = [case for case in CASES if case.outcome not in AT_ADMISSION]
    last: dict[str, str | None] = {}

    def all_reported() -> bool:
        bodies = listed()
        for case in admitted:
            last[case.id] = _status_matches(case, bodies[case.name])
        return not any(last.values())

    deadline = time.monotonic() + 90
    while not all_reported() and time.monotonic() < deadline:
        time.sleep(1)
    assert not any(last.values()), "\n".join(f"{k}: {v}" for k, v in last.items() if v)
    reported_at = time.monotonic() - started

    # -- nothing was created for any of them (but the unschedulable build) --
    children = _children(kube, namespace)
    bodies = listed()
    made = {
        case.id: _children_of(
            children, case.name, (bodies.get(case.name) or {}).get("metadata", {}).get("uid")
        )
        for case in CASES
        if case.outcome != UPDATE
    }
    unexpected = {key: value for key, value in made.items() if value and key != "tp-no-node-holds"}
    assert not unexpected, unexpected
    unschedulable = [case for case in CASES if case.outcome == UNSCHEDULABLE]
    for case in unschedulable:
        assert any(child.startswith("Job/") for child in made[case.id]), made[case.id]

    # -- every fix converges --
    for case in CASES:
        for manifest in case.prerequisites:
            _create(kube, namespace, manifest)
    for case in CASES:
        if case.outcome == YAML:
            result = _kubectl_apply(
                tools, namespace, tmp_path / f"{case.id}-fixed.yaml", yaml.safe_dump(case.fixed)
            )
            assert result.returncode == 0, result.stderr
        else:
            resources.apply(case.fixed)
    fixed_names = {case.fixed["metadata"]["name"] for case in CASES}
    not_ready: list[str] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        bodies = listed()
        not_ready = sorted(name for name in fixed_names if name not in bodies or not _ready(bodies[name]))
        if not not_ready:
            break
        time.sleep(2)
    bodies = listed()
    assert not not_ready, f"{len(not_ready)} of {len(fixed_names)} fixes not Ready:\n" + "\n".join(
        f"{name}: {_brief((bodies.get(name) or {}).get('status'))}" for name in not_ready
    )

    counts = Counter(case.outcome for case in CASES)
    at_admission = sum(counts[outcome] for outcome in AT_ADMISSION)
    failed = counts[INVALID] + counts[MISSING]
    say(
        f"{len(CASES)} bad inputs: {at_admission} refused at admission ({counts[REFUSED]} created, "
        f"{counts[YAML]} kubectl apply --server-side, {counts[UPDATE]} updates), {failed} reported Failed by "
        f"the operator ({counts[INVALID]} InvalidSpec, {counts[MISSING]} missing references), "
        f"{counts[UNSCHEDULABLE]} reported InsufficientGPUs; reported in {reported_at:.0f} s, all "
        f"{len(fixed_names)} fixed converged to Ready in {time.monotonic() - started:.0f} s in all"
    )
