"""GPUs by claim on the real control plane: the scheduler allocates what the operator's template asks for.

Two kwok nodes, each with a ResourceSlice of GPUs as NVIDIA's DRA driver publishes them (an A100 node
and an H100 node): a resource whose selector admits the H100s gets its engine keyed and built for them,
its build and serving pods claim devices from the operator's template, and the kube-scheduler's DRA
plugin allocates them on the H100 node, never the A100 one. Changed to the A100s, a resource builds and
rolls there, and its H100 template goes once no pod takes claims from it. The devices are published by
the test (kwok runs no kubelet plugin); the real-node variant, with a kubelet plugin that prepares them,
is in the pods tier.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from mmd_testbed.localcluster.objects import NodePool
from tests.support.kube import Kube, Resources
from tests.support.nodes import extra_gpu_nodes

from .test_operator import _prepare, example

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

GROUP, VERSION = "resource.k8s.io", "v1"
DRIVER = "gpu.nvidia.com"
A100_NODE = NodePool(count=1, gpus_per_node=2, gpu_model="a100-80gb", name_prefix="dra-a100")
H100_NODE = NodePool(count=1, gpus_per_node=2, gpu_model="h100-80gb", name_prefix="dra-h100")
H100_SELECTOR = f'device.attributes["{DRIVER}"].productName == "NVIDIA H100 80GB HBM3"'
A100_SELECTOR = f'device.attributes["{DRIVER}"].productName == "NVIDIA A100-SXM4-80GB"'


def _slice(node: str, product: str, capability: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{index}",
                    "attributes": {
                        "productName": {"string": product},
                        "brand": {"string": "Nvidia"},
                        "cudaComputeCapability": {"version": f"{capability}.0"},
                        "uuid": {"string": f"GPU-{node}-{index}"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for index in range(2)
            ],
        },
    }


@pytest.fixture(scope="module")
def dra_gpus(kube: Kube, api_client: k8s.ApiClient) -> Iterator[dict[str, str]]:
    """The two nodes and their slices, and the DeviceClass; removed afterwards."""
    custom = k8s.CustomObjectsApi(api_client)
    device_class = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
    }
    with extra_gpu_nodes(kube, A100_NODE) as (a100,), extra_gpu_nodes(kube, H100_NODE) as (h100,):
        made = [
            ("deviceclasses", device_class),
            ("resourceslices", _slice(a100, "NVIDIA A100-SXM4-80GB", "8.0")),
            ("resourceslices", _slice(h100, "NVIDIA H100 80GB HBM3", "9.0")),
        ]
        for plural, body in made:
            custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
        try:
            yield {"a100": a100, "h100": h100}
        finally:
            for plural, body in made:
                custom.delete_cluster_custom_object(GROUP, VERSION, plural, body["metadata"]["name"])


def _allocated(custom: Any, namespace: str) -> dict[str, set[str]]:
    """The nodes of the devices allocated to each pod's claim, by the pod that owns the claim."""
    claims = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims")["items"]
    found: dict[str, set[str]] = {}
    for claim in claims:
        owner = next(iter(claim["metadata"].get("ownerReferences") or []), {}).get("name", "")
        results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
        found.setdefault(owner, set()).update(result["pool"] for result in results)
    return found


def test_a_claim_s_engine_is_built_and_served_on_the_kind_its_selector_admits(
    kube: Kube, resources: Resources, namespace: str, dra_gpus: dict[str, str]
) -> None:
    document = example("llava")
    document["spec"]["gpus"] = {"resourceClaim": {"selector": H100_SELECTOR}}
    _prepare(kube, namespace, document)
    resources.apply(document)
    ready = resources.wait_phase("llava", "Ready", timeout=120)["status"]
    assert ready["engine"]["gpu"] == {"product": "NVIDIA-H100-80GB-HBM3", "computeCapability": "9.0"}
    pods = kube.core.list_namespaced_pod(namespace).items
    assert pods, "the build and serving pods"
    for pod in pods:
        assert pod.spec.node_name == dra_gpus["h100"], pod.metadata.name
        (claim,) = pod.spec.resource_claims
        assert claim.resource_claim_template_name.startswith("llava-gpus-1-")
        for container in pod.spec.containers:
            assert "nvidia.com/gpu" not in (container.resources.limits or {})
    # A finished build pod's claim is gone with its allocation (the claim controller deletes it): the
    # serving pods' claims remain, allocated on the H100 node's devices.
    allocated = _allocated(resources.custom, namespace)
    serving = {pod.metadata.name for pod in pods if pod.metadata.name.startswith("llava-")}
    assert serving and serving <= set(allocated), allocated
    assert set().union(*allocated.values()) == {dra_gpus["h100"]}, allocated


def _templates(resources: Resources, namespace: str) -> set[str]:
    found = resources.custom.list_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaimtemplates"
    )
    return {template["metadata"]["name"] for template in found["items"]}


def test_a_claim_changed_to_another_kind_rolls_there_and_its_old_template_goes(
    kube: Kube, resources: Resources, namespace: str, dra_gpus: dict[str, str]
) -> None:
    document = example("llava")
    document["metadata"]["name"] = "moving"
    document["spec"]["gpus"] = {"resourceClaim": {"selector": H100_SELECTOR}}
    _prepare(kube, namespace, document)
    resources.apply(document)
    resources.wait_phase("moving", "Ready", timeout=120)
    (h100_template,) = _templates(resources, namespace)

    document["spec"]["gpus"]["resourceClaim"]["selector"] = A100_SELECTOR
    resources.apply(document)
    resources.wait_phase(
        "moving",
        "Ready",
        timeout=180,
        status_also=lambda s: (
            s["engine"]["gpu"]["product"] == "NVIDIA-A100-SXM4-80GB" and s.get("rollout") == "Stable"
        ),
    )

    def without_the_h100_one() -> set[str]:
        left = _templates(resources, namespace)
        return left if h100_template not in left else set()

    (a100_template,) = kube.wait_for("the H100 template to go", without_the_h100_one)
    serving = [
        pod
        for pod in kube.core.list_namespaced_pod(namespace).items
        if pod.metadata.name.startswith("moving-") and not pod.metadata.deletion_timestamp
    ]
    assert serving, "the serving pods of the A100 revision"
    for pod in serving:
        assert pod.spec.node_name == dra_gpus["a100"], pod.metadata.name
        assert [c.resource_claim_template_name for c in pod.spec.resource_claims] == [a100_template]


def test_a_claim_admitting_both_kinds_is_refused_and_nothing_is_claimed(
    resources: Resources, namespace: str, dra_gpus: dict[str, str]
) -> None:
    document = example("llava")
    document["spec"]["gpus"] = {
        "resourceClaim": {"selector": f"device.attributes['{DRIVER}'].brand == 'Nvidia'"}
    }
    document["metadata"]["name"] = "either"
    resources.apply(document)
    failed = resources.wait_phase("either", "Failed")
    ready = next(c for c in failed["status"]["conditions"] if c["type"] == "Ready")
    message = " ".join(ready["message"].split())
    assert "spec.gpus.resourceClaim.selector: reaches 2 kinds of GPU" in message
    assert f"NVIDIA-A100-SXM4-80GB (compute capability 8.0) on 1 node(s): {dra_gpus['a100']}" in message
    assert _templates(resources, namespace) == set()
