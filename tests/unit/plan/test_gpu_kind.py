"""The kind of GPU an engine is built for: in its cacheKey, and in where its build and serving pods run."""

from __future__ import annotations

from typing import Any

import yaml

from mmd_operator.config import OperatorConfig
from mmd_operator.desired.decision import manifests
from mmd_operator.facts import GpuKind
from mmd_operator.plan.cache_key import cache_key_inputs
from mmd_operator.plan.resource_plan import plan_resource, plan_spec
from mmd_operator.plan.triton import TritonPlan
from tests.support.examples import EXAMPLES_DIR

A100 = GpuKind("NVIDIA-A100-SXM4-80GB", "8.0")
H100 = GpuKind("NVIDIA-H100-80GB-HBM3", "9.0")
H100_PCIE = GpuKind("NVIDIA-H100-PCIe", "9.0")
TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ZONE_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
                    ]
                }
            ]
        }
    },
    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
}


def _llava(**serving_pod: Any) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES_DIR / "llava.yaml").read_text())
    document["spec"].setdefault("serving", {})["pod"] = serving_pod
    return document


def _triton(document: dict[str, Any], kind: GpuKind | None) -> TritonPlan:
    resource, _ = plan_resource(document)
    plan = plan_spec(resource.spec, kind)
    assert isinstance(plan, TritonPlan)
    return plan


def _objects(document: dict[str, Any], kind: GpuKind | None) -> dict[str, dict[str, Any]]:
    resource, _ = plan_resource(document)
    plan = plan_spec(resource.spec, kind)
    return {m["kind"]: m for m in manifests(resource, plan, config=OperatorConfig())}


def test_an_engine_s_key_names_its_kind_and_no_kind_keeps_the_key_it_had() -> None:
    document = _llava()
    unknown, a100, h100, pcie = (_triton(document, kind) for kind in (None, A100, H100, H100_PCIE))
    assert unknown.cache_key == plan_resource(document)[1].cache_key  # keys made before kinds were read
    assert "gpu" not in cache_key_inputs(unknown.settings)
    assert cache_key_inputs(h100.settings)["gpu"] == {"product": H100.product, "compute_capability": "9.0"}
    # One capability, two products: TensorRT promises an engine only to the device type it was built on.
    assert len({unknown.cache_key, a100.cache_key, h100.cache_key, pcie.cache_key}) == 4


def test_build_and_serving_pods_run_only_on_the_engine_s_kind() -> None:
    objects = _objects(_llava(nodeSelector={"team": "vision"}), H100)
    build = objects["Job"]["spec"]["template"]["spec"]
    serving = objects["Deployment"]["spec"]["template"]["spec"]
    # The build follows the serving pods' selector (it names none of its own), and the kind.
    assert build["nodeSelector"] == {"team": "vision", "nvidia.com/gpu.product": H100.product}
    assert serving["nodeSelector"] == {"team": "vision", "nvidia.com/gpu.product": H100.product}
    unknown = _objects(_llava(), None)
    assert "nodeSelector" not in unknown["Job"]["spec"]["template"]["spec"]
    assert "nodeSelector" not in unknown["Deployment"]["spec"]["template"]["spec"]


def test_the_build_reaches_the_gpus_as_serving_does_tolerations_and_node_affinity() -> None:
    document = _llava(tolerations=[TAINT], affinity=ZONE_AFFINITY)
    document["spec"]["build"] = {"pod": {"nodeSelector": {"nvidia.com/gpu.product": A100.product}}}
    build = _objects(document, H100)["Job"]["spec"]["template"]["spec"]
    # The kind wins over a build selector that named another product: that was the mixed-cluster bug.
    assert build["nodeSelector"] == {"nvidia.com/gpu.product": H100.product}
    assert build["tolerations"] == [TAINT]
    assert build["affinity"] == {"nodeAffinity": ZONE_AFFINITY["nodeAffinity"]}


def test_weights_serve_on_any_kind_so_trtllm_serve_ignores_it() -> None:
    resource, plan = plan_resource(yaml.safe_load((EXAMPLES_DIR / "qwen2_5_vl.yaml").read_text()))
    assert plan_spec(resource.spec, H100) == plan
