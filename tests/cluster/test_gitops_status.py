"""What GitOps controllers make of the status, judged by their own code on statuses from a real run.

Resources are applied with `kubectl apply --server-side` from files, as a GitOps controller applies a
repository, and driven through every phase (Pending, Building, Downloading, Deploying, Ready, Degraded,
Failed) and through the moments the operator has not yet seen a generation. Every status the API server
sends to a watch is kept; each distinct one is judged by Flux's kstatus library and by the Argo CD health
check in gitops/argocd/health.lua run in gopher-lua (testbed/go/gitops). Then, with everything settled, a
server-side dry-run of each original file must change nothing: the operator never writes into what the
user owns.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import watch

from mmd_testbed.localcluster.gitops_check import check
from mmd_testbed.localcluster.stages import BUILD_DURATION_ANNOTATION, FAULT_LABEL
from tests.support.kube import Kube, Resources, Tools

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

ROOT = Path(__file__).resolve().parents[2]
HEALTH_LUA = ROOT / "gitops" / "argocd" / "health.lua"
# What each tool must say of a status the operator wrote for the current generation.
EXPECTED = {
    "Pending": ("InProgress", "Progressing"),
    "Building": ("InProgress", "Progressing"),
    "Downloading": ("InProgress", "Progressing"),
    "Deploying": ("InProgress", "Progressing"),
    "Ready": ("Current", "Healthy"),
    "Degraded": ("Failed", "Degraded"),
    "Failed": ("Failed", "Degraded"),
}
UNOBSERVED = ("InProgress", "Progressing")


class StatusRecorder:
    """Every MultimodalDeployment a watch on one namespace delivers, in order."""

    def __init__(self, custom: Any, namespace: str) -> None:
        self.custom, self.namespace = custom, namespace
        self.seen: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            stream = watch.Watch().stream(
                self.custom.list_namespaced_custom_object,
                "serving.multimodal.dev",
                "v1alpha1",
                self.namespace,
                "multimodaldeployments",
                resource_version=version,
                timeout_seconds=2,
            )
            with contextlib.closing(stream):
                for event in stream:
                    body = event["object"]
                    version = body["metadata"]["resourceVersion"]
                    self.seen.append(body)

    def __enter__(self) -> StatusRecorder:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _manifest(name: str, **spec: dict[str, Any]) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "llava.yaml").read_text())
    document["metadata"]["name"] = name
    for section, fields in spec.items():
        document["spec"].setdefault(section, {}).update(fields)
    return document


def _serve_manifest(name: str, build: dict[str, Any]) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "qwen2_5_vl.yaml").read_text())
    document["metadata"]["name"] = name
    document["spec"]["build"] = build
    return document


def _status_key(body: dict[str, Any]) -> tuple[Any, ...]:
    status = body.get("status") or {}
    ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
    return (
        body["metadata"]["name"],
        body["metadata"]["generation"],
        status.get("observedGeneration"),
        status.get("phase"),
        ready.get("reason"),
        body["metadata"].get("deletionTimestamp"),
    )


@pytest.fixture
def recorder(api_client: k8s.ApiClient, namespace: str) -> Iterator[StatusRecorder]:
    with StatusRecorder(k8s.CustomObjectsApi(api_client), namespace) as recording:
        yield recording


def test_kstatus_and_the_argo_cd_check_read_every_phase_right_and_nothing_drifts(
    kube: Kube,
    resources: Resources,
    namespace: str,
    tools: Tools,
    gitops_check: Path,
    recorder: StatusRecorder,
    tmp_path: Path,
    say: Callable[[str], None],
) -> None:
    # A claim that never binds holds its user in Pending.
    kube.core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "never-binds"},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "no-such-class",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    probes = {"startupTimeoutSeconds": 10}
    manifests = {
        "served": _manifest("served"),
        "pending": _manifest("pending", engineCache={"claimName": "never-binds"}),
        "crashing": _manifest(
            "crashing", serving={"probes": probes, "pod": {"labels": {FAULT_LABEL: "crashloop"}}}
        ),
        "broken-build": _manifest(
            "broken-build",
            engine={"maxBatchSize": 2},
            build={"backoffLimit": 0, "pod": {"labels": {FAULT_LABEL: "fail"}}},
        ),
        "invalid": _manifest("invalid", engine={"maxInputLen": 500}),
        # trtllm-serve: a download that takes a while (kwok's fake download stage) reads Downloading.
        "downloading": _serve_manifest(
            "downloading", {"pod": {"annotations": {BUILD_DURATION_ANNOTATION: "20s"}}}
        ),
    }
    files = {}
    for name, document in manifests.items():
        files[name] = tmp_path / f"{name}.yaml"
        files[name].write_text(yaml.safe_dump(document))
        tools.run("kubectl", "apply", "--server-side", "-n", namespace, "-f", str(files[name]))
    resources.wait_phase("served", "Ready")
    resources.wait_phase("crashing", "Degraded", timeout=90)
    resources.wait_phase("broken-build", "Failed")
    resources.wait_phase("invalid", "Failed")
    resources.wait_phase("pending", "Pending")
    resources.wait_phase("downloading", "Downloading")
    # A change the operator has yet to see, then sees.
    changed = _manifest("served", serving={"replicas": 2})
    files["served"].write_text(yaml.safe_dump(changed))
    tools.run("kubectl", "apply", "--server-side", "-n", namespace, "-f", str(files["served"]))
    resources.wait_phase("served", "Ready")

    samples: dict[tuple[Any, ...], dict[str, Any]] = {}
    for body in recorder.seen:
        samples.setdefault(_status_key(body), body)
    bodies = list(samples.values())
    verdicts = check(gitops_check, bodies, HEALTH_LUA)
    judged: set[str] = set()
    for body, verdict in zip(bodies, verdicts, strict=True):
        status = body.get("status") or {}
        current = status.get("observedGeneration") == body["metadata"]["generation"]
        phase = status.get("phase")
        expected = EXPECTED[phase] if current else UNOBSERVED
        assert (verdict.kstatus, verdict.argocd) == expected, (_status_key(body), verdict)
        judged.add(phase if current else "unobserved")
        if verdict.kstatus == "Failed":
            stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
            assert verdict.kstatus_message == stalled["message"]
            assert (
                stalled["reason"] in verdict.argocd_message and stalled["message"] in verdict.argocd_message
            )
    assert judged == {*EXPECTED, "unobserved"}, f"phases seen: {sorted(judged)}"
    say(f"    kstatus and the Argo CD check judged {len(bodies)} distinct statuses: {sorted(judged)}")
    # Both kinds of unobserved generation: a new resource (the CRD defaults observedGeneration to 0)
    # and a change.
    unobserved = {(key[1], key[2]) for key in samples if key[2] != key[1]}
    assert (1, 0) in unobserved and (2, 1) in unobserved, unobserved

    for name, file in files.items():
        live = resources.get(name)
        dry_run = yaml.safe_load(
            tools.run(
                "kubectl", "apply", "--server-side", "--dry-run=server", "-n", namespace, "-f", str(file),
                "-o", "yaml",
            ).stdout
        )  # fmt: skip
        assert dry_run["spec"] == live["spec"], name
        assert dry_run["metadata"]["generation"] == live["metadata"]["generation"], name
        diff = tools.run("kubectl", "diff", "--server-side", "-n", namespace, "-f", str(file), check=False)
        assert diff.returncode == 0, f"{name} drifted:\n{diff.stdout}{diff.stderr}"
