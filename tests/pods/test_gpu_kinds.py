"""Engines of two kinds of GPU on real nodes: each built and served on its own kind, and refused on another.

The session's two real nodes get their GPUs from the device plugin double, which is also their DRA driver.
For this module the second is made an H100 node (its feature-discovery labels and its plugin's GPUs, both
halves), the first stays an A100 node:

- a resource asking for its GPUs by claim, its selector admitting capability 9.0, is keyed, built and
  served on the H100 node: its pods' claims allocated there, the GPU reaching its containers (CDI);

- a resource whose placement reaches both kinds is refused, naming them, and nothing is built;
- one pinned to each kind builds its own engine on a node of that kind (two keys, no cache hit across
  kinds: the build pod's `nvidia-smi` records the node's GPU in the manifest) and answers from there,
  its `gpu-check` having found the capability its engine was built for;
- the H100 node's GPUs swapped back for A100s, its labels unchanged (a chassis repaired with another card,
  a node mislabelled: what placement cannot see), the H100 engine's replacement pod stops in `gpu-check`
  before tritonserver starts, with both GPUs and capabilities named, and the status carries those words.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from mmd_operator.desired.gpu_check import GPU_CHECK_CONTAINER
from mmd_operator.vocabulary.kinds import GPU_RESOURCE
from mmd_testbed.localcluster import nodes
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.objects import GPU_MODELS, GpuModel, NodePool, gpu_labels
from tests.pods.conftest import GPUS_PER_NODE
from tests.support.kube import Kube, Resources, Tools
from tests.support.pods import example, mmctl_infer, service_ip, serving_pods

pytestmark = pytest.mark.pods

PRODUCT = "nvidia.com/gpu.product"
A100, H100 = "a100-80gb", "h100-80gb"


def _labels(model: str) -> dict[str, str]:
    return gpu_labels(NodePool(count=1, gpus_per_node=GPUS_PER_NODE, gpu_model=model))


@pytest.fixture(scope="module")
def kinds(real_cluster: LocalCluster, kube: Kube) -> Iterator[dict[str, str]]:
    """The real nodes by kind: the first an A100 node, the second made an H100 node until the end."""
    real = f"{nodes.NODE_KIND_LABEL}={nodes.REAL}"
    first, second = sorted(node.metadata.name for node in kube.core.list_node(label_selector=real).items)
    kube.core.patch_node(second, {"metadata": {"labels": _labels(H100)}})
    real_cluster.swap_gpus(second, H100)
    try:
        yield {A100: first, H100: second}
    finally:
        kube.core.patch_node(second, {"metadata": {"labels": _labels(A100)}})
        real_cluster.swap_gpus(second, A100)


def _named(model: GpuModel) -> str:
    return f"{model.name} (compute capability {model.compute_capability})"


def _pinned(name: str, model: str) -> dict[str, object]:
    document = example("llava", serving={"pod": {"nodeSelector": {PRODUCT: GPU_MODELS[model].product}}})
    document["metadata"]["name"] = name
    return document


def _slice_products(api_client: k8s.ApiClient, node: str) -> set[str]:
    """The productName of each GPU the node's DRA driver publishes."""
    slices = k8s.CustomObjectsApi(api_client).list_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceslices"
    )
    return {
        device["attributes"]["productName"]["string"]
        for item in slices["items"]
        if item["spec"].get("nodeName") == node
        for device in item["spec"].get("devices", [])
    }


def test_a_claim_s_engine_is_built_and_served_on_the_kind_its_selector_admits(
    resources: Resources,
    kube: Kube,
    tools: Tools,
    namespace: str,
    api_client: k8s.ApiClient,
    kinds: dict[str, str],
    picture: Path,
) -> None:
    """First in the module: the operator's first listing of the devices sees the H100 node's."""
    h100 = GPU_MODELS[H100]
    kube.wait_for("the H100 node's slice", lambda: _slice_products(api_client, kinds[H100]) == {h100.name})
    selector = 'device.attributes["gpu.nvidia.com"].cudaComputeCapability == semver("9.0.0")'
    document = example("llava", gpus={"resourceClaim": {"selector": selector}})
    document["metadata"]["name"] = "by-claim"
    resources.apply(document)
    engine = resources.wait_phase("by-claim", "Ready", timeout=300)["status"]["engine"]
    assert engine["gpu"] == {"product": h100.product, "computeCapability": "9.0"}
    (build,) = kube.core.list_namespaced_pod(namespace, label_selector=f"job-name={engine['job']}").items
    (pod,) = serving_pods(kube, namespace, "by-claim")
    for made in (build, pod):
        assert made.spec.node_name == kinds[H100], made.metadata.name
        (claim,) = made.spec.resource_claims
        assert claim.resource_claim_template_name.startswith("by-claim-gpus-1-")
        for container in made.spec.containers:
            assert GPU_RESOURCE not in (container.resources.limits or {})
    # The serving pod's claim, allocated on the H100 node's devices (a finished build pod's claim is gone).
    claims = k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(
        "resource.k8s.io", "v1", namespace, "resourceclaims"
    )["items"]
    (allocated,) = [
        claim["status"]["allocation"]["devices"]["results"]
        for claim in claims
        if claim["metadata"]["ownerReferences"][0]["name"] == pod.metadata.name
    ]
    assert [(result["driver"], result["pool"]) for result in allocated] == [("gpu.nvidia.com", kinds[H100])]
    # The claim's GPU reached the containers (CDI): gpu-check found the engine's capability.
    checked = tools.run("kubectl", "logs", "-n", namespace, pod.metadata.name, "-c", GPU_CHECK_CONTAINER)
    assert checked.stdout.strip() == (
        f"gpu check: engine {engine['cacheKey']} was built for compute capability 9.0, as this pod's GPUs"
    )
    answer = mmctl_infer(
        f"http://{service_ip(kube, namespace, 'by-claim')}:8000",
        "--model-type", "llava", "--image", str(picture), "--text", "What is this?",
    )  # fmt: skip
    assert answer.returncode == 0, answer.stderr
    resources.delete("by-claim")


def test_each_kind_builds_and_serves_its_own_engine_and_refuses_another_s(
    resources: Resources,
    kube: Kube,
    tools: Tools,
    namespace: str,
    real_cluster: LocalCluster,
    kinds: dict[str, str],
    picture: Path,
) -> None:
    # Both kinds in reach: refused, naming them (the operator's node listing may be a minute old).
    resources.apply(example("llava"))
    refused = resources.wait_phase("llava", "Failed", timeout=120)
    said = " ".join(
        next(c for c in refused["status"]["conditions"] if c["type"] == "Ready")["message"].split()
    )
    assert "spec.serving.pod.nodeSelector: reaches 2 kinds of GPU" in said
    assert f"{GPU_MODELS[A100].product} (compute capability 8.0) on 1 node(s): {kinds[A100]}" in said
    assert f"{GPU_MODELS[H100].product} (compute capability 9.0) on 1 node(s): {kinds[H100]}" in said
    resources.delete("llava")

    # One resource per kind: two engines, each built and served on its kind.
    for model in (A100, H100):
        resources.apply(_pinned(f"on-{model}", model))
    keys = {}
    for model in (A100, H100):
        status = resources.wait_phase(f"on-{model}", "Ready", timeout=300)["status"]
        engine = status["engine"]
        assert engine["source"] == "Built" and engine["gpu"]["product"] == GPU_MODELS[model].product
        keys[model] = engine["cacheKey"]
        (build,) = kube.core.list_namespaced_pod(namespace, label_selector=f"job-name={engine['job']}").items
        (pod,) = serving_pods(kube, namespace, f"on-{model}")
        assert build.spec.node_name == pod.spec.node_name == kinds[model]
        checked = tools.run("kubectl", "logs", "-n", namespace, pod.metadata.name, "-c", GPU_CHECK_CONTAINER)
        capability = GPU_MODELS[model].compute_capability
        assert checked.stdout.strip() == (
            f"gpu check: engine {engine['cacheKey']} was built for compute capability {capability}, as this "
            "pod's GPUs"
        )
        answer = mmctl_infer(
            f"http://{service_ip(kube, namespace, f'on-{model}')}:8000",
            "--model-type", "llava", "--image", str(picture), "--text", "What is this?",
        )  # fmt: skip
        assert answer.returncode == 0, answer.stderr
    assert keys[A100] != keys[H100]

    # The H100 node's GPUs swapped back for A100s, its labels unchanged: the H100 engine is refused.
    real_cluster.swap_gpus(kinds[H100], A100)
    (pod,) = serving_pods(kube, namespace, f"on-{H100}")
    kube.core.delete_namespaced_pod(pod.metadata.name, namespace)
    words = (
        f"engine {keys[H100]} was built on {_named(GPU_MODELS[H100])} and this pod's GPU 0 is "
        f"{_named(GPU_MODELS[A100])}"
    )

    def refused_by_the_pod() -> str | None:
        message = " ".join(str(resources.condition(f"on-{H100}", "Ready").get("message", "")).split())
        return message if words in message else None

    message = kube.wait_for("the status to name both GPUs", refused_by_the_pod, timeout=120)
    assert f"container {GPU_CHECK_CONTAINER} is in CrashLoopBackOff" in message
    (replacement,) = serving_pods(kube, namespace, f"on-{H100}")
    (server,) = replacement.status.container_statuses
    assert server.state.running is None and server.restart_count == 0, "tritonserver never started"
