"""The CPU and memory of every pod: derived from what runs in it (instances, ranks, engine, /dev/shm, the
checkpoint's size), overridden by the spec, on every container of every example's objects, with no API
token; and the quantities they are written in."""

from __future__ import annotations

import copy
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmd_operator.api import quantities
from mmd_operator.config import OperatorConfig
from mmd_operator.desired.decision import manifests
from mmd_operator.plan.pod_resources import MARGIN, PodResources, size_in_name
from mmd_operator.plan.resource_plan import AnyPlan, plan_resource
from mmd_operator.plan.triton import TritonPlan
from tests.support.examples import ALL_EXAMPLE_PATHS, EXAMPLES_DIR

GIB = 1 << 30


def _document(example: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES_DIR / f"{example}.yaml").read_text())  # type: ignore[no-any-return]


def _plan(document: dict[str, Any]) -> AnyPlan:
    return plan_resource(document)[1]


def _with(example: str, **sections: Any) -> dict[str, Any]:
    """`examples/<example>.yaml` with spec sections merged one level deep."""
    document = _document(example)
    for name, values in sections.items():
        document["spec"][name] = {**document["spec"].get(name, {}), **values}
    return document


def _memory(pod: PodResources) -> Fraction:
    return quantities.parse(pod.requests["memory"])


def _cpu(pod: PodResources) -> Fraction:
    return quantities.parse(pod.requests["cpu"])


# -- quantities ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("24Gi", 24 * GIB),
        ("1536Mi", 1536 << 20),
        ("500m", Fraction(1, 2)),
        ("2", 2),
        (8, 8),
        ("1e3", 1000),
        ("1.5G", 1_500_000_000),
        ("Gi", 0),
        ("-1", -1),
    ],
)
def test_a_quantity_is_read_exactly(text: str | int, value: Fraction | int) -> None:
    assert quantities.parse(text) == value


def test_a_figure_is_written_as_people_write_it() -> None:
    assert quantities.memory(28 * GIB) == "28Gi"
    assert quantities.memory(1536 << 20) == "1536Mi"
    assert quantities.memory(1000) == "1000"
    assert quantities.cpu(Fraction(7, 2)) == "3500m"
    assert quantities.cpu(4) == "4"
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        quantities.parse("96 GB")


# -- every object of every example ---------------------------------------------------------------------


def _pod_templates(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    spec = manifest.get("spec") or {}
    if manifest["kind"] in ("Job", "Deployment"):
        return [spec["template"]]
    if manifest["kind"] == "LeaderWorkerSet":
        group = spec["leaderWorkerTemplate"]
        return [group["leaderTemplate"], group["workerTemplate"]]
    return []


@pytest.mark.parametrize("path", ALL_EXAMPLE_PATHS, ids=lambda path: Path(path).stem)
def test_every_container_requests_cpu_and_memory_under_a_memory_limit_that_holds_its_shm(path: Path) -> None:
    resource, plan = plan_resource(yaml.safe_load(path.read_text()))
    templates = [t for m in manifests(resource, plan, config=OperatorConfig()) for t in _pod_templates(m)]
    assert templates
    for template in templates:
        spec = template["spec"]
        assert spec["automountServiceAccountToken"] is False
        memory_volumes = {
            volume["name"]: quantities.parse(volume["emptyDir"]["sizeLimit"])
            for volume in spec["volumes"]
            if (volume.get("emptyDir") or {}).get("medium") == "Memory"
        }
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), container["name"]
            assert "cpu" not in resources["limits"], "no CPU limit: the CFS quota throttles"
            limit = quantities.parse(resources["limits"]["memory"])
            assert quantities.parse(resources["requests"]["memory"]) <= limit
            mounted = sum(memory_volumes.get(mount["name"], 0) for mount in container.get("volumeMounts", []))
            # tmpfs pages count against the container that writes them: the limit holds them and more.
            assert mounted < limit, container["name"]


def test_the_status_names_each_kind_of_pod_with_the_basis_of_its_figure() -> None:
    plan = _plan(_document("llava"))
    build, serving = plan.resources.status()
    assert (build.pod, serving.pod) == ("Build", "Serving")
    assert serving.requests == {"cpu": "2", "memory": "28Gi"} and serving.limits == {"memory": "28Gi"}
    assert serving.basis == (
        "derived 28Gi: (tritonserver rank 3Gi + its engine, read whole 13.2Gi + multimodal_encoders "
        "instance 2.5Gi + postprocessing instance 1Gi + preprocessing instance 1Gi + tensorrt_llm_bls "
        "instance 1Gi) x 1.2 + /dev/shm 2Gi, up to a whole Gi; llava-hf/llava-1.5-7b-hf, the reference "
        "checkpoint, has 7.06 B parameters"
    )
    # The conversion holds the checkpoint twice at 16 bits, and /dev/shm 8Gi counts.
    assert build.basis.startswith("derived 45Gi: (builder 4Gi + the checkpoint as loaded, 16 bits 13.2Gi + ")


# -- derived from what runs ------------------------------------------------------------------------


def test_the_python_instances_the_rendered_configs_count_are_added_up() -> None:
    one = _plan(_document("llava_onevision"))
    four = _plan(_with("llava_onevision", serving={"instances": {"preprocessing": 4, "postprocessing": 3}}))
    assert isinstance(four, TritonPlan)
    assert "count: 4" in four.repository.configs["preprocessing"]
    shares = {share.what: share for share in four.resources.serving.figures.processes}
    assert shares["preprocessing instance"].count == 4 and shares["postprocessing instance"].count == 3
    # Three more preprocessing instances of 3 GiB (onevision's processor decodes images and video) and two
    # more postprocessing instances of 1 GiB, with the margin; the server decodes, so half a core each.
    added = (3 * 3 + 2 * 1) * MARGIN
    assert _memory(four.resources.serving) - _memory(one.resources.serving) in {
        Fraction(int(added) * GIB),
        Fraction((int(added) + 1) * GIB),
    }
    assert _cpu(four.resources.serving) - _cpu(one.resources.serving) == Fraction(3, 2) + Fraction(1, 2)


def test_the_shared_memory_is_counted_at_its_size() -> None:
    base = _plan(_document("qwen2_5_vl"))
    larger = _plan(_with("qwen2_5_vl", serving={"sharedMemorySize": "18Gi"}))
    assert _memory(larger.resources.serving) - _memory(base.resources.serving) == 16 * GIB


def test_tensor_parallel_ranks_share_the_engine_and_each_brings_its_server() -> None:
    one = _plan(_document("llava"))
    two = _plan(_with("llava", engine={"tensorParallelSize": 2}))
    ranks = {share.what: share for share in two.resources.serving.figures.processes}
    assert ranks["tritonserver rank"].count == 2
    engine = {share.what: share for share in one.resources.serving.figures.processes}[
        "its engine, read whole"
    ]
    assert ranks["its engine, read whole"].count == 2
    assert abs(ranks["its engine, read whole"].mib * 2 - engine.mib) <= 1
    # Rank 1 loads multimodal_encoders too, and returns before reading the vision engine.
    assert {(s.what, s.mib) for s in two.resources.serving.figures.processes} >= {
        ("multimodal_encoders instance", 2560),
        ("multimodal_encoders instance", 2048),
    }
    assert _cpu(two.resources.serving) - _cpu(one.resources.serving) == Fraction(5, 4)
    assert _cpu(two.resources.job) - _cpu(one.resources.job) == 1  # type: ignore[arg-type]


def test_weight_only_precision_shrinks_the_engine_and_the_converted_weights() -> None:
    full = _plan(_document("llava"))
    int4 = _plan(_with("llava", engine={"weightOnlyPrecision": "int4"}))
    assert _memory(int4.resources.serving) < _memory(full.resources.serving)
    assert _memory(int4.resources.job) < _memory(full.resources.job)  # type: ignore[arg-type]


def test_a_group_s_worker_runs_ranks_and_no_server() -> None:
    plan = _plan(_document("qwen2_5_vl-72b-two-nodes"))
    assert plan.resources.serving.pod == "Leader" and plan.resources.worker is not None
    leader = {share.what for share in plan.resources.serving.figures.processes}
    worker = {share.what for share in plan.resources.worker.figures.processes}
    assert "trtllm-serve process, with video frames" in leader and not any(
        "trtllm-serve" in w for w in worker
    )
    assert _memory(plan.resources.worker) < _memory(plan.resources.serving)
    triton = _plan(_document("llava-tp16-two-nodes"))
    assert triton.resources.worker is not None
    worker_parts = {share.what for share in triton.resources.worker.figures.processes}
    assert "preprocessing instance" not in worker_parts and "multimodal_encoders instance" in worker_parts


def test_video_adds_its_frames_only_when_it_is_served() -> None:
    with_video = _plan(_document("qwen2_5_vl"))
    images_only = _plan(_with("qwen2_5_vl", serving={"modalities": ["image"]}))
    assert _memory(with_video.resources.serving) - _memory(images_only.resources.serving) in {
        Fraction(GIB),
        Fraction(2 * GIB),
    }


# -- what the sizes rest on ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("llava-hf/llava-1.5-13b-hf", 13.0),
        ("Salesforce/blip2-opt-6.7b", 6.7),
        ("Qwen/Qwen2-VL-72B-Instruct", 72.0),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", None),  # active parameters of a mixture of experts
        ("microsoft/Phi-4-multimodal-instruct", None),
        ("org/model-v1b", None),
    ],
)
def test_a_size_is_read_from_a_checkpoint_s_name(name: str, billions: float | None) -> None:
    assert size_in_name(name) == billions


def test_the_checkpoint_s_size_is_known_stated_or_the_reference_s_and_the_status_says_which() -> None:
    def basis(example: str, source: dict[str, Any]) -> str:
        document = _document(example)
        document["spec"]["model"]["source"] = source
        return _plan(document).resources.serving.status().basis

    assert basis("llava", {"huggingface": {"repo": "llava-hf/llava-1.5-13b-hf"}}).endswith(
        "llava-hf/llava-1.5-13b-hf states 13 B parameters in its name (a vision tower may add up to a "
        "billion, within the margin)"
    )
    assert basis("qwen2_5_vl", {"huggingface": {"repo": "Qwen/Qwen2.5-VL-72B-Instruct"}}).endswith(
        "Qwen/Qwen2.5-VL-72B-Instruct has 73.4 B parameters"
    )
    assert basis("llava", {"pvc": {"claimName": "models", "path": "/weights"}}).endswith(
        "the size of /weights on claim models is not known: the figures rest on the reference checkpoint "
        "llava-hf/llava-1.5-7b-hf's 7.06 B parameters; set the pod's resources for a larger checkpoint"
    )
    assert basis("llava", {"pvc": {"claimName": "models", "path": "/hub/llava-1.5-7b-hf/"}}).endswith(
        "/hub/llava-1.5-7b-hf/ on claim models, the reference checkpoint, has 7.06 B parameters"
    )
    whisper = _document("whisper")
    whisper["spec"]["model"]["variant"] = "tiny"
    build = _plan(whisper).resources.job
    assert build is not None and build.status().basis.endswith("Whisper tiny has 0.039 B parameters")


# -- the spec's values over the derived ones ---------------------------------------------------------------


def test_the_spec_s_values_win_and_the_others_follow_them() -> None:
    derived = _plan(_document("llava")).resources.serving
    assert derived.from_spec == ()

    request_only = _plan(_with("llava", serving={"pod": {"resources": {"requests": {"memory": "64Gi"}}}}))
    # A request above the derived limit raises the limit with it.
    assert request_only.resources.serving.requests["memory"] == "64Gi"
    assert request_only.resources.serving.limits["memory"] == "64Gi"
    assert request_only.resources.serving.from_spec == ("requests.memory",)

    limit_only = _plan(_with("llava", serving={"pod": {"resources": {"limits": {"memory": "16Gi"}}}}))
    # A limit below the derived figure lowers the request to it, and the status says what it risks.
    assert limit_only.resources.serving.requests["memory"] == "16Gi"
    assert limit_only.resources.serving.status().basis.endswith(
        "; the spec sets limits.memory; the memory limit is below the derived 28Gi: the container is "
        "OOMKilled if it holds more"
    )

    cpu = {"requests": {"ephemeral-storage": "10Gi"}, "limits": {"cpu": "1500m"}}
    capped = _plan(_with("llava", serving={"pod": {"resources": cpu}}))
    assert capped.resources.serving.requests == {
        "ephemeral-storage": "10Gi",
        "cpu": "1500m",
        "memory": derived.requests["memory"],
    }
    assert capped.resources.serving.limits == {"cpu": "1500m", "memory": derived.limits["memory"]}
    assert capped.resources.serving.manifest()["limits"]["nvidia.com/gpu"] == "1"


def test_the_download_s_pod_takes_the_build_section_and_has_no_shared_memory_to_hold() -> None:
    document = _with("qwen2_5_vl", build={"pod": {"resources": {"limits": {"memory": "1Gi"}}}})
    plan = _plan(document)
    assert plan.resources.job is not None and plan.resources.job.pod == "Download"
    assert plan.resources.job.manifest() == {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"memory": "1Gi"},
    }


def test_a_pvc_source_on_trtllm_serve_has_no_job_pod() -> None:
    document = copy.deepcopy(_document("qwen2_5_vl"))
    document["spec"]["model"]["source"] = {"pvc": {"claimName": "models", "path": "/Qwen2.5-VL-3B-Instruct"}}
    plan = _plan(document)
    assert plan.resources.job is None
    assert [pod.pod for pod in plan.resources.status()] == ["Serving"]
