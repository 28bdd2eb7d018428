"""Where a GPU pod may run, and what the status says when it cannot: the one matching rule
(`judgement.placement.match`) and the messages built on it, from nodes and pods as the API server
sends them (the local cluster's fake GPU nodes, reduced by `kube.object_facts`)."""

from __future__ import annotations

from typing import Any

import pytest

from mmd_operator.facts import Meta, Nodes, PodFacts, PodPhase, Taint, Toleration
from mmd_operator.judgement.placement import (
    GpuDemand,
    ObstacleKind,
    match,
    obstacle,
    tolerates,
    unschedulable,
)
from mmd_operator.kube import object_facts
from mmd_operator.kube.nodes import nodes_of, requested_by_node, scheduler_node_count
from mmd_testbed.localcluster.objects import NodePool, gpu_node

SCHEDULER = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: not helpful."
SERVING_5X8 = GpuDemand("serving", 5, 8)


def cluster(*pools: NodePool, taint: dict[str, str] | None = None, cpu_nodes: int = 0) -> Nodes:
    """Nodes as the local cluster makes them; `taint` on every node of the last pool."""
    items: list[dict[str, Any]] = []
    for index, pool in enumerate(pools):
        for name in pool.node_names():
            node = gpu_node(name, pool)
            if taint is not None and index == len(pools) - 1:
                node["spec"]["taints"] = [taint]
            items.append(node)
    items += [
        {"metadata": {"name": f"cpu-{n}"}, "status": {"allocatable": {"cpu": "8"}}} for n in range(cpu_nodes)
    ]
    return nodes_of(items)


def pod_spec(gpus: int, **scheduling: Any) -> dict[str, Any]:
    return {
        "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        **scheduling,
    }


def pending(name: str, spec: dict[str, Any], scheduler: str = SCHEDULER) -> PodFacts:
    """A pod the scheduler cannot place, as the watch delivers it."""
    return object_facts.pod(
        {
            "metadata": {"name": name},
            "spec": spec,
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": scheduler,
                    }
                ],
            },
        }
    )


FOUR_BY_8 = cluster(NodePool())


def test_the_node_and_pod_facts_keep_what_the_scheduler_matches_and_no_more() -> None:
    node = gpu_node("gpu-node-0", NodePool())
    node["spec"] = {
        "unschedulable": True,
        "taints": [
            {"key": "soft", "effect": "PreferNoSchedule"},
            {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
        ],
    }
    facts = object_facts.node(node)
    assert facts.gpus == 8 and dict(facts.labels)["nvidia.com/gpu.count"] == "8"
    # PreferNoSchedule keeps no pod off; a cordoned node counts as tainted, as the scheduler sees it.
    assert facts.taints == (Taint("dedicated", "ml", "NoSchedule"), object_facts.CORDONED)
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    placed = pending("p", pod_spec(4, nodeSelector={"b": "2", "a": "1"}, affinity=affinity)).placement
    assert placed is not None and placed.gpus == 4 and placed.node_selector == (("a", "1"), ("b", "2"))
    assert placed.affinity_terms[0][0].values == ("a",)
    # A pod the scheduler has placed keeps only its GPU count.
    running = object_facts.pod(
        {"metadata": {"name": "r"}, "spec": pod_spec(2), "status": {"phase": "Running"}}
    )
    assert (running.gpus, running.placement) == (2, None)


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (Toleration(operator="Exists"), Taint("anything", "x", "NoExecute"), True),
        (Toleration("dedicated", "Equal", "ml"), Taint("dedicated", "ml", "NoSchedule"), True),
        (Toleration("dedicated", "Equal", "ml"), Taint("dedicated", "web", "NoSchedule"), False),
        (Toleration("dedicated", "Exists"), Taint("dedicated", "web", "NoSchedule"), True),
        (Toleration("dedicated", "Exists", effect="NoExecute"), Taint("dedicated", "", "NoSchedule"), False),
        (Toleration("other", "Exists"), Taint("dedicated", "", "NoSchedule"), False),
    ],
)
def test_tolerations_follow_the_schedulers_rule(
    toleration: Toleration, taint: Taint, tolerated: bool
) -> None:
    assert tolerates(toleration, taint) is tolerated


def test_more_gpus_than_the_nodes_offer_names_the_fields_the_arithmetic_and_the_nodes() -> None:
    pod = pending("llava-5", pod_spec(8))
    nodes = Nodes(FOUR_BY_8.total, FOUR_BY_8.with_gpus, requested=(("gpu-node-0", 8), ("elsewhere", 8)))
    said = unschedulable(pod, SERVING_5X8, nodes)
    assert said.reason == "InsufficientGPUs"
    arithmetic = "spec.serving.replicas 5 x spec.engine.tensorParallelSize 8 = 40 nvidia.com/gpu"
    offered = (
        "nodes matching the pod's selector and tolerations offer 32 (gpu-node-0 8, gpu-node-1 8, "
        "gpu-node-2 8, gpu-node-3 8): room for 4 of the 5 pods"
    )
    assert said.message == (
        f"pod llava-5 cannot be scheduled: {arithmetic}; {offered}; this operator's pods already request 8 "
        f"of these GPUs. Scheduler: {SCHEDULER}"
    )
    assert said.summary == (
        f"{arithmetic}, but {offered}; lower spec.serving.replicas, or add GPU nodes (the Available "
        "condition has the figures and the scheduler's words)."
    )


def test_without_the_nodes_the_message_gives_the_specs_side_of_the_sum_and_the_schedulers_words() -> None:
    said = unschedulable(pending("llava-5", pod_spec(8)), SERVING_5X8, None)
    assert said.message == (
        "pod llava-5 cannot be scheduled: spec.serving.replicas 5 x spec.engine.tensorParallelSize 8 = 40 "
        f"nvidia.com/gpu. Scheduler: {SCHEDULER}"
    )
    assert said.summary.startswith(
        "spec.serving.replicas 5 x spec.engine.tensorParallelSize 8 = 40 nvidia.com/gpu"
    )
    assert said.summary.endswith("(the Available condition quotes the scheduler).")


def test_a_build_pod_larger_than_any_node_it_may_use_names_the_largest() -> None:
    nodes = cluster(NodePool(), NodePool(count=1, gpus_per_node=2, name_prefix="small"))
    spec = pod_spec(4, nodeSelector={"nvidia.com/gpu.count": "2"})
    said = unschedulable(pending("build-x", spec), GpuDemand("build", 1, 4), nodes)
    assert said.message.startswith(
        "build pod build-x cannot be scheduled: spec.engine.tensorParallelSize 4 = 4 nvidia.com/gpu for one "
        "build pod; nodes matching the pod's selector and tolerations offer at most 2 on one node (small-0). "
        "Scheduler: "
    )
    assert (
        "lower spec.engine.tensorParallelSize, or let spec.build.pod reach nodes with more GPUs"
        in said.summary
    )
    assert "the EngineReady condition" in said.summary


def test_a_selector_value_no_node_carries_is_named_with_its_key_and_the_values_nodes_carry() -> None:
    spec = pod_spec(
        1, nodeSelector={"nvidia.com/gpu.product": "H100", "topology.kubernetes.io/zone": "local-a"}
    )
    said = unschedulable(
        pending("llava-0", spec, "0/4 nodes are available: 4 node(s) didn't match"),
        GpuDemand("serving", 1, 1),
        FOUR_BY_8,
    )
    assert said.reason == "Unschedulable"
    clause = (
        'spec.serving.pod.nodeSelector["nvidia.com/gpu.product"]=H100 matches no node with nvidia.com/gpu '
        "(they carry NVIDIA-A100-SXM4-80GB)"
    )
    assert said.message == (
        "pod llava-0 cannot be scheduled: spec.serving.replicas 1 x spec.engine.tensorParallelSize 1 = 1 "
        f"nvidia.com/gpu; {clause}. Scheduler: 0/4 nodes are available: 4 node(s) didn't match"
    )
    assert said.summary == (
        f"{clause}; set it to a value the nodes carry, or remove it (the Available condition has the figures "
        "and the scheduler's words)."
    )
    unknown_key = match(object_facts.pod_placement(pod_spec(1, nodeSelector={"gpu": "big"})), FOUR_BY_8)
    found = obstacle(unknown_key, GpuDemand("serving", 1, 1))
    assert found is not None and found.what.endswith("(none carries gpu)")


def test_selector_labels_each_carried_but_never_together_are_named_together() -> None:
    nodes = cluster(NodePool(count=1), NodePool(count=1, gpu_model="l40s", name_prefix="l40s"))
    spec = pod_spec(
        1, nodeSelector={"nvidia.com/gpu.family": "ada-lovelace", "nvidia.com/gpu.memory": "81920"}
    )
    found = obstacle(match(object_facts.pod_placement(spec), nodes), GpuDemand("serving", 1, 1))
    assert found is not None and found.kind is ObstacleKind.SELECTOR
    assert found.what == (
        "spec.serving.pod.nodeSelector (nvidia.com/gpu.family=ada-lovelace, nvidia.com/gpu.memory=81920) "
        "matches no node with nvidia.com/gpu: no node carries all of these labels"
    )


def test_a_taint_no_toleration_covers_is_named_with_its_key_and_the_field_to_add_it_to() -> None:
    taint = {"key": "bad-input.mmd.dev/small", "value": "true", "effect": "NoSchedule"}
    nodes = cluster(NodePool(count=2, gpus_per_node=2), taint=taint)
    said = unschedulable(pending("build-y", pod_spec(2)), GpuDemand("build", 1, 2), nodes)
    what = (
        "the 2 nodes with nvidia.com/gpu carry taints the pod does not tolerate: "
        "bad-input.mmd.dev/small=true:NoSchedule"
    )
    assert f"; {what}. Scheduler: " in said.message
    assert said.summary.startswith(
        f"{what}; add a toleration for bad-input.mmd.dev/small to spec.build.pod.tolerations"
    )
    tolerating = pod_spec(2, tolerations=[{"key": "bad-input.mmd.dev/small", "operator": "Exists"}])
    assert obstacle(match(object_facts.pod_placement(tolerating), nodes), GpuDemand("build", 1, 2)) is None


def test_required_node_affinity_is_matched_as_the_scheduler_does_and_named_when_it_matches_nothing() -> None:
    nodes = cluster(NodePool(count=2), NodePool(count=1, gpus_per_node=2, name_prefix="small"))

    def fits(*requirements: dict[str, Any], fields: tuple[dict[str, Any], ...] = ()) -> list[str]:
        term = {"matchExpressions": list(requirements), "matchFields": list(fields)}
        affinity = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
        return [
            n.name for n in match(object_facts.pod_placement(pod_spec(1, affinity=affinity)), nodes).matching
        ]

    assert fits({"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["4"]}) == [
        "gpu-node-0",
        "gpu-node-1",
    ]
    assert fits({"key": "nvidia.com/gpu.count", "operator": "NotIn", "values": ["8"]}) == ["small-0"]
    assert fits({"key": "nvidia.com/gpu.count", "operator": "DoesNotExist"}) == []
    assert fits(fields=({"key": "metadata.name", "operator": "In", "values": ["gpu-node-1"]},)) == [
        "gpu-node-1"
    ]
    terms = [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]
    affinity = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    }
    found = obstacle(
        match(object_facts.pod_placement(pod_spec(1, affinity=affinity)), nodes), GpuDemand("serving", 1, 1)
    )
    assert found is not None and found.field.endswith("requiredDuringSchedulingIgnoredDuringExecution")
    assert found.what.endswith("matches none of the 3 nodes with nvidia.com/gpu")


def test_a_cluster_without_gpus_says_so_and_nodes_with_gpus_enough_give_no_obstacle() -> None:
    bare = cluster(cpu_nodes=3)
    found = obstacle(match(object_facts.pod_placement(pod_spec(1)), bare), GpuDemand("serving", 1, 1))
    assert found is not None and found.what == "none of the 3 nodes has allocatable nvidia.com/gpu"
    assert (
        obstacle(match(object_facts.pod_placement(pod_spec(8)), FOUR_BY_8), GpuDemand("serving", 4, 8))
        is None
    )
    # Room counts whole pods: two nodes of 12 hold two pods of 8, not three.
    twelve = cluster(NodePool(count=2, gpus_per_node=12))
    found = obstacle(match(object_facts.pod_placement(pod_spec(8)), twelve), GpuDemand("serving", 3, 8))
    assert found is not None and found.what.endswith(
        "offer 24 (gpu-node-0 12, gpu-node-1 12): room for 2 of the 3 pods"
    )


def test_the_gpus_the_operators_pods_hold_are_counted_per_node_and_the_schedulers_node_count_read() -> None:
    def placed(node: str, gpus: int, phase: PodPhase) -> PodFacts:
        return PodFacts(meta=Meta(name=f"{node}-{phase}"), phase=phase, node=node, gpus=gpus)

    pods = [
        placed("a", 8, PodPhase.RUNNING),
        placed("a", 2, PodPhase.PENDING),
        placed("b", 4, PodPhase.SUCCEEDED),  # a finished build holds nothing
        PodFacts(meta=Meta(name="unplaced"), phase=PodPhase.PENDING, gpus=8),
    ]
    assert requested_by_node(pods) == (("a", 10),)
    assert scheduler_node_count(SCHEDULER) == 4
    assert scheduler_node_count("pod has unbound immediate PersistentVolumeClaims") is None


# -- memory and CPU: a pod requests them, a node offers them ---------------------------------------

MEMORY_SCHEDULER = "0/4 nodes are available: 4 Insufficient memory. preemption: not helpful."


def sized_spec(gpus: int, cpu: str, memory: str, **scheduling: Any) -> dict[str, Any]:
    """A pod spec of one server container and a smaller init container, as the operator renders them."""
    resources = {
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"memory": memory, "nvidia.com/gpu": str(gpus)},
    }
    helper = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}}
    return {
        "initContainers": [{"name": "model-repository", "resources": helper}],
        "containers": [{"name": "tritonserver", "resources": resources}],
        **scheduling,
    }


def test_nodes_and_pods_keep_allocatable_and_requested_cpu_and_memory() -> None:
    (node, *_) = cluster(NodePool(cpu="96", memory="512Gi")).with_gpus
    assert (node.cpu_millis, node.memory_bytes) == (96_000, 512 << 30)
    placed = object_facts.pod_placement(sized_spec(1, "3500m", "28Gi"))
    assert (placed.cpu_millis, placed.memory_bytes, placed.gpus) == (3500, 28 << 30, 1)
    # The scheduler counts the largest init container when it asks for more than the containers together.
    spec = sized_spec(1, "100m", "128Mi")
    spec["initContainers"][0]["resources"]["requests"]["memory"] = "1Gi"
    assert object_facts.pod_placement(spec).memory_bytes == 1 << 30


def test_a_pod_needing_more_memory_than_a_gpu_node_has_names_the_field_the_figures_and_the_node() -> None:
    nodes = cluster(NodePool(count=2, memory="16Gi"))
    pod = pending("llava-x", sized_spec(1, "2", "28Gi"), MEMORY_SCHEDULER)
    said = unschedulable(pod, GpuDemand("serving", 1, 1), nodes)
    assert said.reason == "InsufficientMemory"
    field = "spec.serving.pod.resources.requests.memory"
    assert said.message == (
        "pod llava-x cannot be scheduled: spec.serving.replicas 1 x spec.engine.tensorParallelSize 1 = 1 "
        f"nvidia.com/gpu; the pod requests 28Gi of memory (status.podResources; {field} sets it), but the "
        "nodes matching its selector and tolerations with 1 nvidia.com/gpu offer at most 16Gi allocatable "
        f"on one node (gpu-node-1). Scheduler: {MEMORY_SCHEDULER}"
    )
    assert said.summary.endswith(
        f"lower {field} (the pod is OOMKilled if it then holds more than its limit), or let spec.serving.pod "
        "reach nodes with more memory (the Available condition has the figures and the scheduler's words)."
    )
    found = match(pod.placement or object_facts.pod_placement(sized_spec(1, "2", "28Gi")), nodes)
    blocked = obstacle(found, GpuDemand("serving", 1, 1))
    assert blocked is not None and blocked.kind is ObstacleKind.MEMORY and not blocked.gpus


def test_a_build_pod_needing_more_cpu_than_a_node_has_says_so() -> None:
    nodes = cluster(NodePool(count=1, cpu="4"))
    scheduler = "0/1 nodes are available: 1 Insufficient cpu."
    said = unschedulable(
        pending("build-x", sized_spec(8, "9", "45Gi"), scheduler), GpuDemand("build", 1, 8), nodes
    )
    assert said.reason == "InsufficientCPU"
    assert (
        "the pod requests 9 of cpu (status.podResources; spec.build.pod.resources.requests.cpu sets it)"
        in (said.message)
    )
    assert "offer at most 4 allocatable on one node (gpu-node-0)" in said.message


def test_memory_that_holds_fewer_pods_than_the_gpus_makes_the_room() -> None:
    nodes = cluster(NodePool(count=2, memory="64Gi"))
    pod = pending("llava-x", sized_spec(1, "2", "28Gi"))
    demand = GpuDemand("serving", 6, 1)
    said = unschedulable(pod, demand, nodes)
    assert said.reason == "InsufficientGPUs"
    assert (
        "offer 16 (gpu-node-0 8, gpu-node-1 8): room for 4 of the 6 pods (their memory or CPU holds fewer "
        "pods than their GPUs)"
    ) in said.message


def test_memory_the_nodes_have_but_other_pods_hold_is_said_as_such() -> None:
    pod = pending("llava-x", sized_spec(1, "2", "28Gi"), MEMORY_SCHEDULER)
    said = unschedulable(pod, GpuDemand("serving", 1, 1), FOUR_BY_8)
    assert said.reason == "InsufficientMemory"
    assert said.summary == (
        "the pod requests 28Gi of memory (status.podResources; spec.serving.pod.resources.requests.memory "
        "sets it); the nodes pod llava-x may use have that much allocatable, but the scheduler finds too "
        "little free beside the pods they run: free some or add nodes (the Available condition has the "
        "figures and the scheduler's words)."
    )
    unknown = unschedulable(pod, GpuDemand("serving", 1, 1), None)
    assert unknown.summary.startswith("the pod requests 28Gi of memory (status.podResources; ")
