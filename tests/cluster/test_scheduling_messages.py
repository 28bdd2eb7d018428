"""Pods the scheduler cannot place are reported in the spec's fields and numbers, read back exactly.

The operator runs on nothing but a token of the chart's ServiceAccount, confined to the test's namespace,
once with the chart's permission to list nodes (`rbac.readNodes`) and once without: then it gives the
spec's side of the sum and the scheduler's words, says so once in its log, and loops on nothing. Three
resources cover the three ways a pod is kept off: more GPUs than the nodes have (serving), a nodeSelector
value no node carries (build), a taint no toleration covers (build). The node directory's own rule (no
listing per reconcile; a 403 asked again only after a long while), and the device directory's, are checked
against the same API server.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from mmd_operator.kube import devices as device_directory
from mmd_operator.kube import nodes as node_directory
from mmd_operator.kube.client import KubeClient
from mmd_operator.kube.devices import DeviceDirectory
from mmd_operator.kube.nodes import NodeDirectory
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.objects import NodePool
from tests.support.kube import Kube, Resources, Tools, new_namespace, unprivileged_kubeconfig
from tests.support.nodes import extra_gpu_nodes

from .conftest import OperatorProcess, operator_writes_at_rest

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "mmd-operator"
# A node of another GPU model that no pod tolerates, unless it says so.
RESERVED_KEY = "placement-test.mmd.dev/reserved"
RESERVED = NodePool(count=1, gpus_per_node=2, gpu_model="l40s", name_prefix="sched-l40s")
SESSION_NODES = "gpu-node-0 8, gpu-node-1 8, gpu-node-2 8, gpu-node-3 8"
FIGURES = "the {} condition has the figures and the scheduler's words"


def llava(name: str, **sections: dict[str, Any]) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "llava.yaml").read_text())
    document["metadata"]["name"] = name
    for section, fields in sections.items():
        document["spec"].setdefault(section, {}).update(fields)
    return document


@pytest.fixture(params=[True, False], ids=["may-list-nodes", "may-not-list-nodes"])
def confined_operator(
    request: pytest.FixtureRequest,
    kube: Kube,
    tools: Tools,
    local_cluster: LocalCluster,
    operator: OperatorProcess,
    crd: None,
    namespace: str,
    tmp_path: Path,
) -> Iterator[tuple[bool, OperatorProcess]]:
    """The chart installed for `namespace` alone, with or without `rbac.readNodes`, and an operator on its
    ServiceAccount's token (which asks for nodes either way: without the permission it gets a 403)."""
    may_list = bool(request.param)
    release_namespace = new_namespace(kube, "sched-release")
    release = f"sched-{uuid.uuid4().hex[:6]}"
    tools.run(
        "helm", "install", release, str(CHART), "-n", release_namespace, "--set", "crds.enabled=false",
        "--set", f"watchNamespaces={{{namespace}}}", "--set", f"rbac.readNodes={str(may_list).lower()}",
    )  # fmt: skip
    account = f"{release}-mmd-operator"
    token = tools.run("kubectl", "create", "token", account, "-n", release_namespace, "--duration=1h").stdout
    kubeconfig = local_cluster.token_kubeconfig(token.strip(), tmp_path / "token.kubeconfig")
    operator.stop()  # the session's cluster-admin operator would report these resources too
    confined = OperatorProcess(
        kubeconfig,
        tmp_path / "operator.log",
        namespaces=(namespace,),
        command=(sys.executable, "-m", "mmd_operator"),
    )
    try:
        taint = {"key": RESERVED_KEY, "value": "true", "effect": "NoSchedule"}
        with extra_gpu_nodes(kube, RESERVED, taints=(taint,)):
            confined.start()
            yield may_list, confined
            confined.stop()
    finally:
        confined.stop()
        operator.start()
        tools.run("helm", "uninstall", release, "-n", release_namespace, "--wait")
        kube.core.delete_namespace(release_namespace, propagation_policy="Background")


def _unschedulable(kube: Kube, namespace: str, selector: str) -> list[tuple[str, str]]:
    """(name, the scheduler's message) of each pod matching `selector` that it cannot place."""
    found = []
    for pod in kube.core.list_namespaced_pod(namespace, label_selector=selector).items:
        scheduled = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
        if scheduled is not None and scheduled.status == "False" and scheduled.reason == "Unschedulable":
            found.append((pod.metadata.name, scheduled.message))
    return found


def _gpus_held(kube: Kube, namespace: str) -> int:
    """GPUs the operator's pods of `namespace` request on nodes (placed and not finished)."""
    held = 0
    for pod in kube.core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/managed-by=mmd-operator"
    ).items:
        if pod.spec.node_name and pod.status.phase in ("Pending", "Running"):
            held += sum(int((c.resources.limits or {}).get("nvidia.com/gpu", 0)) for c in pod.spec.containers)
    return held


def _expected(case: str, may_list: bool, pod: str, words: str, held: int) -> tuple[str, str]:
    """The detailed condition's message and Ready's, for `case`'s unschedulable `pod`."""
    if case == "too-many":
        sum_ = "spec.serving.replicas 5 x spec.engine.tensorParallelSize 8 = 40 nvidia.com/gpu"
        if not may_list:
            return (
                f"pod {pod} cannot be scheduled: {sum_}. Scheduler: {words}",
                f"{sum_} and the scheduler finds too few free for pod {pod}: free or add GPUs, or lower "
                "spec.engine.tensorParallelSize or spec.serving.replicas (the Available condition quotes the "
                "scheduler).",
            )
        offered = (
            f"nodes matching the pod's selector and tolerations offer 32 ({SESSION_NODES}): room for 4 of "
            "the 5 pods"
        )
        return (
            f"pod {pod} cannot be scheduled: {sum_}; {offered}; this operator's pods already request {held} "
            f"of these GPUs. Scheduler: {words}",
            f"{sum_}, but {offered}; lower spec.serving.replicas, or add GPU nodes "
            f"({FIGURES.format('Available')}).",
        )
    sum_ = "spec.engine.tensorParallelSize 1 = 1 nvidia.com/gpu for one build pod"
    if not may_list:
        return (
            f"build pod {pod} cannot be scheduled: {sum_}. Scheduler: {words}",
            f"the scheduler cannot place build pod {pod}: change what it names in spec.build.pod (the "
            "EngineReady condition quotes the scheduler).",
        )
    if case == "wrong-product":
        what = (
            'spec.build.pod.nodeSelector["nvidia.com/gpu.product"]=NVIDIA-H100-80GB-HBM3 matches no node '
            "with nvidia.com/gpu (they carry NVIDIA-A100-SXM4-80GB, NVIDIA-L40S)"
        )
        fix = "set it to a value the nodes carry, or remove it"
    else:
        what = (
            "the 1 node with nvidia.com/gpu that spec.build.pod selects carries a taint the pod does not "
            f"tolerate: {RESERVED_KEY}=true:NoSchedule"
        )
        fix = f"add a toleration for {RESERVED_KEY} to spec.build.pod.tolerations"
    return (
        f"build pod {pod} cannot be scheduled: {sum_}; {what}. Scheduler: {words}",
        f"{what}; {fix} ({FIGURES.format('EngineReady')}).",
    )


def test_a_pod_the_scheduler_cannot_place_is_reported_with_the_fields_the_sum_and_the_nodes(
    confined_operator: tuple[bool, OperatorProcess],
    kube: Kube,
    resources: Resources,
    namespace: str,
    local_cluster: LocalCluster,
    say: Callable[[str], None],
) -> None:
    may_list, process = confined_operator
    h100 = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
    l40s = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L40S"}}
    # Each its own engine (maxBatchSize), so no two share a build Job made from another's pod settings.
    cases = {
        "too-many": (
            llava("too-many", engine={"tensorParallelSize": 8, "maxBatchSize": 4}, serving={"replicas": 5}),
            "Available",
            "app.kubernetes.io/instance=too-many,app.kubernetes.io/component=serving",
            "InsufficientGPUs",
        ),
        "wrong-product": (
            llava("wrong-product", engine={"maxBatchSize": 2}, build={"pod": h100}, serving={"pod": h100}),
            "EngineReady",
            "app.kubernetes.io/component=engine-build",
            "Unschedulable",
        ),
        "untolerated": (
            llava("untolerated", engine={"maxBatchSize": 3}, build={"pod": l40s}, serving={"pod": l40s}),
            "EngineReady",
            "app.kubernetes.io/component=engine-build",
            "Unschedulable",
        ),
    }
    for document, *_ in cases.values():
        resources.apply(document)

    def reported(case: str) -> str | None:
        """None once `case` shows exactly what it must; else what it shows."""
        _, kind, selector, reason = cases[case]
        detail, ready = resources.condition(case, kind), resources.condition(case, "Ready")
        shown = f"{kind} {detail.get('reason')}: {detail.get('message')!r}\nReady: {ready.get('message')!r}"
        for pod, words in _unschedulable(kube, namespace, selector):
            message, sentence = _expected(case, may_list, pod, words, _gpus_held(kube, namespace))
            if (detail.get("reason"), detail.get("message")) == (reason, message) and ready.get(
                "message"
            ) == sentence:
                return None
        return shown

    last: dict[str, str | None] = {}

    def all_reported() -> bool:
        last.update({case: reported(case) for case in cases})
        return not any(last.values())

    kube.wait_for(
        "every resource to report its pod exactly",
        all_reported,
        timeout=180,
        interval=1,
        explain=lambda: "\n".join(f"{case}: {shown}" for case, shown in last.items() if shown),
    )
    for case, (_, _, _, reason) in cases.items():
        assert resources.condition(case, "Ready")["reason"] == reason
    # An unchanged world gives an unchanged status: the figures do not make the operator write at rest.
    assert operator_writes_at_rest(local_cluster.audit_log, namespace, 10) == []
    log = process.output()
    refused = [line for line in log.splitlines() if "may not list nodes" in line]
    assert len(refused) == (0 if may_list else 1), log[-3000:]
    assert "Traceback" not in log and "Reconcile of" not in log, log[-3000:]
    figures = "with" if may_list else "without"
    say(f"{figures} node figures: {resources.condition('too-many', 'Available')['message']}")


def _gets() -> float:
    return REGISTRY.get_sample_value("mmd_api_requests_total", {"method": "GET"}) or 0.0


def test_the_device_directory_lists_once_for_many_reconciles_and_asks_a_refusal_again_only_much_later(
    local_cluster: LocalCluster,
    kube: Kube,
    tools: Tools,
    namespace: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    client = KubeClient.from_kubeconfig(str(local_cluster.kubeconfig), field_manager="device-directory-test")

    def listed(directory: DeviceDirectory, renew: bool = False) -> tuple[Any, float]:
        before = _gets()
        return directory.devices(renew=renew), _gets() - before

    directory = DeviceDirectory(client, clock=lambda: now[0])
    devices, requests = listed(directory)
    assert requests == 2 and devices is not None  # the ResourceSlices and the DeviceClasses
    for _ in range(50):  # a burst of reconciles: one listing serves them all
        assert listed(directory) == (devices, 0)
        assert listed(directory, renew=True) == (devices, 0)
    now[0] += device_directory.RETRY_AFTER
    assert listed(directory, renew=True)[1] == 2  # a claim that admitted none of the listed devices
    now[0] += device_directory.MAX_AGE - 1
    assert listed(directory)[1] == 0
    now[0] += 1
    assert listed(directory)[1] == 2

    # A ServiceAccount that may not list them: None, said once, not asked again for FORBIDDEN_RETRY.
    kubeconfig = unprivileged_kubeconfig(kube, tools, local_cluster, namespace, "no-devices", tmp_path)
    refused_client = KubeClient.from_kubeconfig(str(kubeconfig), field_manager="t")
    refused = DeviceDirectory(refused_client, clock=lambda: now[0])
    refused_at = now[0]
    with caplog.at_level(logging.INFO, logger=device_directory.__name__):
        assert listed(refused) == (None, 1)
        for _ in range(20):
            now[0] += device_directory.RETRY_AFTER
            assert listed(refused, renew=True) == (None, 0)
        now[0] = refused_at + device_directory.FORBIDDEN_RETRY
        assert listed(refused) == (None, 1)
    said = [
        record.getMessage()
        for record in caplog.records
        if "may not list ResourceSlices" in record.getMessage()
    ]
    assert len(said) == 1 and "403" in said[0], said


def test_the_node_directory_lists_once_for_many_reconciles_and_asks_a_refusal_again_only_much_later(
    local_cluster: LocalCluster, kube: Kube, tools: Tools, namespace: str, tmp_path: Path
) -> None:
    now = [0.0]
    client = KubeClient.from_kubeconfig(str(local_cluster.kubeconfig), field_manager="node-directory-test")

    def listed(directory: NodeDirectory, count: int | None = None) -> tuple[Any, float]:
        before = _gets()
        return directory.nodes(count), _gets() - before

    directory = NodeDirectory(client, clock=lambda: now[0])
    nodes, requests = listed(directory)
    total = len(kube.core.list_node().items)
    assert requests == 1 and nodes is not None and nodes.total == total
    assert {node.name for node in nodes.with_gpus} >= {f"gpu-node-{n}" for n in range(4)}
    for _ in range(50):  # a burst of reconciles: one listing serves them all
        assert listed(directory, total) == (nodes, 0)
    now[0] += node_directory.RETRY_AFTER
    assert listed(directory, total + 1)[1] == 1  # the scheduler counts another number of nodes
    now[0] += node_directory.MAX_AGE - 1
    assert listed(directory)[1] == 0
    now[0] += 1
    assert listed(directory)[1] == 1
    assert listed(NodeDirectory(client, enabled=False)) == (None, 0)

    # A ServiceAccount that may not list nodes: None, once asked, then not again for FORBIDDEN_RETRY.
    kubeconfig = unprivileged_kubeconfig(kube, tools, local_cluster, namespace, "no-nodes", tmp_path)
    refused_client = KubeClient.from_kubeconfig(str(kubeconfig), field_manager="t")
    refused = NodeDirectory(refused_client, clock=lambda: now[0])
    assert listed(refused) == (None, 1)
    for _ in range(20):
        assert listed(refused, 99) == (None, 0)
    now[0] += node_directory.FORBIDDEN_RETRY
    assert listed(refused) == (None, 1)
