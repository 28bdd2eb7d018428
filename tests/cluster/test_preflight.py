"""`mmctl validate --cluster`'s preflight against the real API server: what a resource needs from the
cluster, found (or found missing) with field paths, read-only, never printing a Secret's value, and only
warnings where the kubeconfig may not read something."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmctl.preflight import Finding, Severity, preflight
from mmd_operator.kube.client import KubeClient
from mmd_operator.plan.resource_plan import plan_resource
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.objects import NodePool
from mmd_testbed.localcluster.stages import STORAGE_CLASS
from tests.support.kube import Kube, Resources, Tools, restricted, unprivileged_kubeconfig
from tests.support.nodes import extra_gpu_nodes

# The session's operator, had an earlier module on this worker started it, would make pods that take GPUs.
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("no_operator")]

ROOT = Path(__file__).resolve().parents[2]
TOKEN_VALUE = "hf_preflight_never_printed_0123456789"
RESERVED_KEY = "preflight-test.mmd.dev/reserved"
RESERVED = NodePool(count=1, gpus_per_node=2, gpu_model="l40s", name_prefix="preflight-l40s")


def mllama(**sections: dict[str, Any]) -> Any:
    """The mllama example (token Secret `huggingface`, key `token`), `sections` merged into its spec."""
    document: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "mllama.yaml").read_text())
    for section, fields in sections.items():
        document["spec"].setdefault(section, {}).update(fields)
    return plan_resource(document)


@pytest.fixture(scope="module")
def reserved_node(kube: Kube) -> Iterator[None]:
    taint = {"key": RESERVED_KEY, "value": "true", "effect": "NoSchedule"}
    with extra_gpu_nodes(kube, RESERVED, taints=(taint,)):
        yield


@pytest.fixture
def client(local_cluster: LocalCluster) -> KubeClient:
    return KubeClient.from_kubeconfig(str(local_cluster.kubeconfig), field_manager="mmctl")


def by_field(findings: list[Finding]) -> dict[str, list[Finding]]:
    grouped: dict[str, list[Finding]] = {}
    for finding in findings:
        grouped.setdefault(finding.field, []).append(finding)
    return grouped


def _secret(kube: Kube, namespace: str, data: dict[str, str]) -> None:
    kube.core.create_namespaced_secret(namespace, {"metadata": {"name": "huggingface"}, "stringData": data})


@pytest.mark.usefixtures("reserved_node")
def test_a_resource_the_cluster_can_run_passes_with_what_was_found(
    kube: Kube, client: KubeClient, namespace: str
) -> None:
    _secret(kube, namespace, {"token": TOKEN_VALUE})
    findings = preflight(*mllama(), namespace, client)
    assert [f for f in findings if f.severity is not Severity.INFO] == []
    found = {f.field: f.message for f in findings}
    assert found[f"namespace {namespace}"] == (
        "Pod Security enforces restricted (latest); the operator's pods meet restricted, so it admits them"
    )
    assert found["spec.engineCache.storageClassName"] == (
        f"the operator creates the claim mmd-engine-cache with the default StorageClass {STORAGE_CLASS}"
    )
    # The tainted L40S node matches no pod (no toleration), so the figures are the session's four nodes.
    nodes = (
        "nodes matching the pod's selector and tolerations offer 32 (gpu-node-0 8, gpu-node-1 8, gpu-node-2 8"
    )
    assert found["spec.build.pod"].startswith(
        f"spec.engine.tensorParallelSize 1 = 1 nvidia.com/gpu for one build pod; {nodes}"
    )
    assert found["spec.serving.pod"].startswith(
        f"spec.serving.replicas 1 x spec.engine.tensorParallelSize 1 = 1 nvidia.com/gpu; {nodes}"
    )
    # mllama's serving pod asks for 38Gi and 2 CPUs: a node's 1Ti and 96 CPUs hold more than its 8 GPUs.
    assert found["spec.serving.pod"].endswith(", room for 32 pods; a pod requests 2 CPU and 38Gi of memory")
    assert TOKEN_VALUE not in "\n".join(str(f) for f in findings)


@pytest.mark.usefixtures("reserved_node")
def test_what_the_cluster_lacks_is_named_by_field_with_what_to_do(
    kube: Kube, client: KubeClient, namespace: str
) -> None:
    l40s = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L40S"}}
    resource, plan = mllama(
        engine={"tensorParallelSize": 8, "maxBatchSize": 4},
        serving={"replicas": 5},
        build={"pod": l40s},
        engineCache={"storageClassName": "no-such-class"},
    )
    findings = by_field(preflight(resource, plan, namespace, client))
    secret = findings["spec.model.source.huggingface.tokenSecretRef"]
    assert [(f.severity, f.message) for f in secret] == [
        (
            Severity.ERROR,
            f"Secret huggingface not found in namespace {namespace}: create it with kubectl create secret "
            f"generic huggingface -n {namespace} --from-literal=token=<your Hugging Face token>",
        )
    ]
    storage = findings["spec.engineCache.storageClassName"]
    assert [(f.severity, f.message) for f in storage] == [
        (
            Severity.ERROR,
            "StorageClass no-such-class not found, so the engine-cache claim mmd-engine-cache the operator "
            "creates would stay Pending: name one kubectl get storageclass lists",
        )
    ]
    taint = findings["spec.build.pod.tolerations"]
    assert [(f.severity, f.message) for f in taint] == [
        (
            Severity.ERROR,
            "the 1 node with nvidia.com/gpu that spec.build.pod selects carries a taint the pod does not "
            f"tolerate: {RESERVED_KEY}=true:NoSchedule; add a toleration for {RESERVED_KEY} to "
            "spec.build.pod.tolerations",
        )
    ]
    replicas = findings["spec.serving.replicas"]
    assert [f.severity for f in replicas] == [Severity.WARNING]
    assert replicas[0].message.startswith(
        "spec.serving.replicas 5 x spec.engine.tensorParallelSize 8 = 40 nvidia.com/gpu, but nodes matching "
        "the pod's selector and tolerations offer 32 (gpu-node-0 8"
    )
    assert replicas[0].message.endswith(
        "room for 4 of the 5 pods; lower spec.serving.replicas, or add GPU nodes"
    )

    # The Secret without its key; a serving selector no node satisfies.
    _secret(kube, namespace, {"other": TOKEN_VALUE})
    resource, plan = mllama(serving={"pod": {"nodeSelector": {"nvidia.com/gpu.product": "H100"}}})
    found = preflight(resource, plan, namespace, client)
    errors = {(f.field, f.message) for f in found if f.severity is Severity.ERROR}
    assert errors == {
        (
            "spec.model.source.huggingface.tokenSecretRef",
            "Secret huggingface has no key token: add the key to the Secret, or name one it has in "
            "spec.model.source.huggingface.tokenSecretRef.key",
        ),
        (
            "spec.serving.pod.nodeSelector",
            'spec.serving.pod.nodeSelector["nvidia.com/gpu.product"]=H100 matches no node with '
            "nvidia.com/gpu (they carry NVIDIA-A100-SXM4-80GB, NVIDIA-L40S); set it to a value the nodes "
            "carry, or remove it",
        ),
        # The build pod takes the serving pods' selector (spec.build.pod names none): it goes where they go.
        (
            "spec.build.pod.nodeSelector",
            'spec.build.pod.nodeSelector["nvidia.com/gpu.product"]=H100 matches no node with '
            "nvidia.com/gpu (they carry NVIDIA-A100-SXM4-80GB, NVIDIA-L40S); set it to a value the nodes "
            "carry, or remove it",
        ),
    }
    assert TOKEN_VALUE not in "\n".join(str(f) for f in found)


def test_a_missing_namespace_a_missing_source_claim_and_no_default_class_are_errors(
    kube: Kube, client: KubeClient, namespace: str
) -> None:
    resource, plan = mllama()
    found = preflight(resource, plan, "no-such-namespace-preflight", client)
    assert [(f.field, f.message) for f in found if f.severity is Severity.ERROR] == [
        ("metadata.namespace", "namespace no-such-namespace-preflight not found")
    ]
    document = yaml.safe_load((ROOT / "examples" / "llava.yaml").read_text())
    document["spec"]["model"]["source"] = {"pvc": {"claimName": "weights"}}
    found = preflight(*plan_resource(document), namespace, client)
    assert [(f.field, f.message) for f in found if f.severity is Severity.ERROR] == [
        (
            "spec.model.source.pvc.claimName",
            f"PersistentVolumeClaim weights not found in namespace {namespace}: create the claim with the "
            "model in it, or name another",
        )
    ]
    # With no default StorageClass the claim the operator creates would wait for ever.
    annotation = "storageclass.kubernetes.io/is-default-class"
    kube.storage.patch_storage_class(STORAGE_CLASS, {"metadata": {"annotations": {annotation: "false"}}})
    try:
        _secret(kube, namespace, {"token": TOKEN_VALUE})
        storage = [
            f for f in preflight(*mllama(), namespace, client) if f.field.startswith("spec.engineCache")
        ]
    finally:
        kube.storage.patch_storage_class(STORAGE_CLASS, {"metadata": {"annotations": {annotation: "true"}}})
    assert [(f.severity, f.message) for f in storage] == [
        (
            Severity.ERROR,
            "no StorageClass is the cluster's default, so the engine-cache claim mmd-engine-cache the "
            "operator creates would stay Pending: name a class here, or create the claim and name it in "
            "spec.engineCache.claimName",
        )
    ]


def test_what_the_kubeconfig_may_not_read_is_a_warning_not_an_error(
    kube: Kube, tools: Tools, local_cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = unprivileged_kubeconfig(kube, tools, local_cluster, namespace, "nobody", tmp_path)
    client = KubeClient.from_kubeconfig(str(kubeconfig), field_manager="mmctl")
    found = preflight(*mllama(), namespace, client)
    assert found and all(f.severity is Severity.WARNING for f in found), found
    assert {f.field for f in found} == {
        "metadata.namespace",
        "spec.model.source",
        "spec.engineCache",
        "nodes",
    }
    assert all("could not read" in f.message and "403" in f.message for f in found), found


def test_mmctl_validate_cluster_with_credentials_the_api_server_refuses_is_one_line_and_exit_4(
    local_cluster: LocalCluster, tools: Tools, tmp_path: Path
) -> None:
    """401: a token the API server does not know (expired, say); nothing is checked, nothing printed
    as if it were a verdict on the resource."""
    kubeconfig = local_cluster.token_kubeconfig("not-a-token", tmp_path / "stale.kubeconfig")
    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    command = [sys.executable, "-m", "mmctl.main", "validate", "--cluster", "--kubeconfig", str(kubeconfig)]
    result = subprocess.run(
        [*command, "-f", str(ROOT / "examples" / "llava.yaml")],
        env=tools.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 4, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"mmctl validate --cluster: the API server {server} refuses the kubeconfig's credentials (401 "
        "Unauthorized): they are wrong or expired; log in again or pick another --context"
    ]


def test_mmctl_validate_cluster_runs_the_preflight_over_a_directory(
    kube: Kube, tools: Tools, namespace: str, tmp_path: Path
) -> None:
    """The command a user runs: `mmctl validate --cluster -n <ns> -f dir/`, text and JSON."""
    _secret(kube, namespace, {"other": TOKEN_VALUE})  # the key the example names is missing
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "mllama.yaml").write_text((ROOT / "examples" / "mllama.yaml").read_text())
    (tmp_path / "apps" / "whisper.yaml").write_text((ROOT / "examples" / "whisper.yaml").read_text())
    mmctl = [sys.executable, "-m", "mmctl.main"]
    command = [*mmctl, "validate", "--cluster", "-n", namespace, "-f", str(tmp_path / "apps")]
    env = tools.env
    text = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert text.returncode == 1, text.stdout + text.stderr
    lines = text.stdout.splitlines()
    # file:N, the line the document starts on (after the example's comments).
    start = next(
        n
        for n, line in enumerate((ROOT / "examples" / "mllama.yaml").read_text().splitlines(), 1)
        if line.startswith("apiVersion:")
    )
    assert f"{tmp_path}/apps/mllama.yaml:{start} mllama 1 error, 1 warning" in lines
    assert lines[-1] == "2 resources: 0 ok, 1 with warnings, 1 invalid; 0 other documents skipped"
    assert (
        "  spec.model.source.huggingface.tokenSecretRef: Secret huggingface has no key token: add the key "
        "to the Secret, or name one it has in spec.model.source.huggingface.tokenSecretRef.key"
    ) in lines
    assert any(line.startswith("  note: spec.serving.pod: spec.serving.replicas 1 x ") for line in lines)
    assert TOKEN_VALUE not in text.stdout + text.stderr

    as_json = subprocess.run(
        [*command, "-o", "json"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    report = json.loads(as_json.stdout)
    assert report["exitCode"] == 1 and report["summary"]["resources"] == 2
    by_name = {r["name"]: r for r in report["resources"]}
    assert [e["path"] for e in by_name["mllama"]["errors"]] == [
        "spec.model.source.huggingface.tokenSecretRef"
    ]
    assert by_name["whisper"]["errors"] == []
    assert any(
        n.startswith(f"namespace {namespace}: Pod Security enforces restricted")
        for n in by_name["whisper"]["notes"]
    )


@pytest.mark.usefixtures("reserved_node", "crd")
def test_a_change_to_a_deployment_whose_nodes_have_no_free_gpu_warns_that_it_rolls_in_place(
    kube: Kube, client: KubeClient, namespace: str, resources: Resources
) -> None:
    """A change only (the resource exists): a surge pod needs a free GPU now on a node the pods may use."""
    _secret(kube, namespace, {"token": TOKEN_VALUE})
    node = f"{RESERVED.name_prefix}-0"
    on_reserved = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": RESERVED_KEY, "operator": "Exists", "effect": "NoSchedule"}],
    }
    pinned = {"serving": {"pod": on_reserved}, "engine": {"tensorParallelSize": 2, "maxBatchSize": 4}}
    resource, plan = mllama(**pinned)
    surge = "spec.serving.rollout.strategy"
    assert surge not in {f.field for f in preflight(resource, plan, namespace, client)}  # a first apply

    document = yaml.safe_load((ROOT / "examples" / "mllama.yaml").read_text())
    resources.apply(document)  # no operator runs here: the resource only exists
    free = by_field(preflight(resource, plan, namespace, client))[surge]
    assert [(f.severity, f.message) for f in free] == [
        (Severity.INFO, f"a change surges: {node} has 2 free nvidia.com/gpu for a pod of 2")
    ]

    holder = restricted(
        {
            **on_reserved,
            "containers": [
                {"name": "hold", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
            ],
        }
    )
    kube.core.create_namespaced_pod(namespace, {"metadata": {"name": "gpu-holder"}, "spec": holder})
    kube.wait_for(
        f"the GPU holder on {node}",
        lambda: kube.core.read_namespaced_pod("gpu-holder", namespace).spec.node_name == node,
    )
    full = by_field(preflight(resource, plan, namespace, client))[surge]
    assert [(f.severity, f.message) for f in full] == [
        (
            Severity.WARNING,
            "no node the serving pods may use has 2 free nvidia.com/gpu for a surge pod now "
            f"(free: {node} 0): this change's rollout goes on in place after "
            "spec.serving.rollout.surgeWaitSeconds (60 s), and the model is down for a whole load",
        )
    ]
    in_place = mllama(
        serving={"pod": on_reserved, "rollout": {"strategy": "InPlace"}}, engine=pinned["engine"]
    )
    (chosen,) = by_field(preflight(*in_place, namespace, client))[surge]
    assert chosen.severity is Severity.INFO and chosen.message.startswith("InPlace: a change stops each pod")
    canary = mllama(serving={"pod": on_reserved, "rollout": {"strategy": "Canary"}}, engine=pinned["engine"])
    (waits,) = by_field(preflight(*canary, namespace, client))[surge]
    assert (waits.severity, waits.message) == (
        Severity.WARNING,
        "no node the serving pods may use has 2 free nvidia.com/gpu for a canary pod now "
        f"(free: {node} 0): this change's canary pod waits until one is (the stable pods serve on "
        "meanwhile, and the status says InsufficientGPUs)",
    )
