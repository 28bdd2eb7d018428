"""The trtllm-serve runtime offline: the generated `--config` and argv against the pinned trtllm-serve's own
facts (the double's LlmArgs models and click command), the version triple, the download Job's token, a
PersistentVolumeClaim source, the judgement and status of a download, and the engine runtime unchanged."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine_builder import versions
from engine_builder.weights_format import weights_key
from mmd_operator.config import OperatorConfig
from mmd_operator.desired.decision import manifests
from mmd_operator.facts import JobFacts, Meta, Observed, PodFacts, PodPhase
from mmd_operator.judgement.availability import serving_state
from mmd_operator.judgement.placement import GpuDemand, serving_demand
from mmd_operator.judgement.trtllm_serve import WORDS, weights_state
from mmd_operator.knowledge import Runtime, serve_knowledge_of
from mmd_operator.kube.engine_index import EngineIndex
from mmd_operator.plan.resource_plan import plan_resource
from mmd_operator.plan.triton import TritonPlan
from mmd_operator.plan.trtllm_serve import TrtllmServePlan
from mmd_operator.status import ConfigMapState, Findings, report
from mmd_testbed.trtllm_serve import config as serve_config
from mmd_testbed.trtllm_serve.cli import build as build_command
from mmd_testbed.trtllm_serve.facts import PINNED_VERSION, load
from tests.support.builds import summary
from tests.support.downloads import succeeded
from tests.support.examples import EXAMPLE_PATHS, SERVE_EXAMPLE_PATHS

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def serve_plan(path: Path, **spec: Any) -> tuple[Any, TrtllmServePlan]:
    document = yaml.safe_load(path.read_text())
    for section, fields in spec.items():
        if isinstance(fields, dict):
            document["spec"].setdefault(section, {}).update(fields)
        else:
            document["spec"][section] = fields
    resource, plan = plan_resource(document)
    assert isinstance(plan, TrtllmServePlan)
    return resource, plan


VARIANTS = [
    {},
    {"engine": {"kvCacheDtype": "fp8", "maxNumTokens": 2048, "dtype": "bfloat16"}},
    {"serving": {"maxTokensInPagedKvCache": 100000, "kvCacheFreeGpuMemFraction": 0.5}},
]


@pytest.mark.parametrize("path", SERVE_EXAMPLE_PATHS, ids=lambda p: p.stem)
@pytest.mark.parametrize("variant", VARIANTS, ids=["example", "fp8-tokens-dtype", "kv-limits"])
def test_the_config_and_argv_are_what_the_pinned_trtllm_serve_accepts(
    path: Path, variant: dict[str, Any], tmp_path: Path
) -> None:
    model_type = yaml.safe_load(path.read_text())["spec"]["model"]["type"]
    if "kvCacheDtype" in str(variant) and not serve_knowledge_of(model_type).fp8_kv_cache:
        pytest.skip(f"{model_type} offers no FP8 KV cache")
    _, plan = serve_plan(path, **copy.deepcopy(variant))
    facts = load()
    config_file = tmp_path / "config.yaml"
    config_file.write_text(plan.config_yaml)
    # Every key a TorchLlmArgs (or KvCacheConfig) field of 1.2.1, or the double refuses it as the server does.
    applied = serve_config.load_config(str(config_file), serve_config.ArgsModels(facts.llm_args))
    assert applied["return_perf_metrics"] is True
    assert "enable_block_reuse" in applied["kv_cache_config"]
    argv = plan.argv("0123456789abcdef0123")
    assert argv[0] == "trtllm-serve" and argv[argv.index("--config") + 1] == "/etc/trtllm-serve/config.yaml"
    argv[argv.index("--config") + 1] = str(config_file)
    serve = build_command(facts).commands["serve"]
    context = serve.make_context("serve", argv[1:])  # click refuses an unknown option or a bad value
    assert context.params["host"] == "0.0.0.0" and context.params["backend"] == "pytorch"
    assert context.params["tensor_parallel_size"] == plan.spec.engine.tensor_parallel_size


def test_the_version_triple_agrees() -> None:
    version = versions.SERVE_TRTLLM_VERSION
    assert version == PINNED_VERSION
    assert f"nvcr.io/nvidia/tensorrt-llm/release:{version}" == versions.SERVE_BASE_IMAGE
    assert versions.TRTLLM_SERVE_IMAGE.endswith(f"-trtllm{version}")
    assert load().sources["pinned"].startswith(f"TensorRT-LLM {version} ({versions.SERVE_BASE_IMAGE}")
    _, plan = serve_plan(SERVE_EXAMPLE_PATHS[0])
    assert plan.serving_image == OperatorConfig().trtllm_serve_image == versions.TRTLLM_SERVE_IMAGE


@pytest.mark.parametrize("path", EXAMPLE_PATHS, ids=lambda p: p.stem)
def test_naming_the_engine_runtime_changes_nothing(path: Path) -> None:
    document = yaml.safe_load(path.read_text())
    named = copy.deepcopy(document)
    named["spec"]["runtime"] = "triton-trtllm-engine"
    (resource, plan), (named_resource, named_plan) = plan_resource(document), plan_resource(named)
    assert isinstance(plan, TritonPlan) and isinstance(named_plan, TritonPlan)
    assert named_plan.cache_key == plan.cache_key and named_plan.files() == plan.files()
    config = OperatorConfig()
    assert manifests(named_resource, named_plan, config=config) == manifests(resource, plan, config=config)


def test_the_token_reaches_the_download_as_a_mounted_secret_file_only() -> None:
    resource, plan = serve_plan(Path("examples/phi4mm.yaml"))
    (job,) = [m for m in manifests(resource, plan, config=OperatorConfig()) if m["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"][-2:] == ["--token-file", "/var/run/secrets/huggingface/token"]
    assert "env" not in container and "hf-token" not in " ".join(container["args"])
    secret = next(v for v in pod["volumes"] if "secret" in v)["secret"]
    assert secret == {
        "secretName": "hf-token",
        "items": [{"key": "token", "path": "token"}],
        "defaultMode": 0o440,
    }
    assert "nvidia.com/gpu" not in str(container.get("resources"))


def test_a_volume_source_downloads_nothing_and_mounts_the_claim() -> None:
    resource, plan = serve_plan(
        Path("examples/qwen2_5_vl.yaml"),
        model={"source": {"pvc": {"claimName": "models", "path": "/qwen"}}},
    )
    objects = manifests(resource, plan, config=OperatorConfig())
    assert [m["kind"] for m in objects] == ["ConfigMap", "Deployment", "Service", "NetworkPolicy"]
    deployment = objects[1]["spec"]["template"]["spec"]
    assert deployment["containers"][0]["command"][1] == "/model-source/qwen"
    assert {"name": "model-source", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}} in (
        deployment["volumes"]
    )
    state = weights_state(plan, Observed(now=NOW), None, 1, NO_GPUS)
    assert (state.ready, state.reason) == (True, "Volume")


def test_without_a_policy_in_the_spec_the_pods_reach_only_dns() -> None:
    resource, plan = serve_plan(Path("examples/qwen2_5_vl.yaml"))
    (policy,) = [
        m for m in manifests(resource, plan, config=OperatorConfig()) if m["kind"] == "NetworkPolicy"
    ]
    assert policy["spec"]["policyTypes"] == ["Egress"]
    assert [rule["ports"] for rule in policy["spec"]["egress"]] == [
        [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    ]
    resource, plan = serve_plan(Path("examples/phi4mm.yaml"))
    (policy,) = [
        m for m in manifests(resource, plan, config=OperatorConfig()) if m["kind"] == "NetworkPolicy"
    ]
    assert [rule["ports"] for rule in policy["spec"]["ingress"]] == [
        [{"protocol": "TCP", "port": 8000}],
        [{"protocol": "TCP", "port": 8000}],
    ]


NO_GPUS = GpuDemand(role="build", replicas=1, gpus_per_pod=0)


def _downloading(plan: TrtllmServePlan) -> Observed:
    assert plan.download is not None
    job = JobFacts(meta=Meta(name=f"download-{plan.download.key}"))
    pod = PodFacts(meta=Meta(name="download-x"), phase=PodPhase.RUNNING, node="gpu-node-1")
    return Observed(now=NOW, job=job, job_pods=(pod,))


def test_a_download_in_progress_reads_downloading_then_ready_with_the_commit() -> None:
    resource, plan = serve_plan(Path("examples/qwen2_5_vl.yaml"))
    assert plan.download is not None
    state = weights_state(plan, _downloading(plan), None, 1, NO_GPUS)
    assert state.reason == "Downloading" and "in pod download-x on gpu-node-1" in state.message
    serving = serving_state(
        None, (), desired=1, applied=False, artifact_ready=False, now=NOW, startup_budget=1800,
        demand=serving_demand(resource.spec), waits_for=WORDS,
    )  # fmt: skip
    findings = Findings(
        generation=1,
        runtime=Runtime.TRTLLM_SERVE,
        artifact=state,
        configmap=ConfigMapState(name="qwen2-5-vl-repo-x", size=10, applied=True),
        serving=serving,
    )
    status = report(findings, previous=None, now=NOW).status
    assert status.phase == "Downloading"
    assert [c.type for c in status.conditions][:5] == [
        "Validated", "WeightsReady", "ServingConfigReady", "Available", "Ready",
    ]  # fmt: skip
    assert status.conditions[3].reason == "WeightsNotReady"

    done = succeeded("Qwen/Qwen2.5-VL-3B-Instruct")
    index = EngineIndex().record(summary()).record_download(done)
    again = EngineIndex.from_configmap_data(index.to_configmap_data())
    assert again == index and again.resolved(done.key) == done.commit
    assert again.snapshot(weights_key(done.repo, done.commit)) == done
    observed = Observed(now=NOW, resolved_commit=done.commit, artifact=done)
    ready = weights_state(plan, observed, None, 1, NO_GPUS)
    assert (ready.ready, ready.reason) == (True, "CacheHit")
    assert ready.message.startswith(f"{done.repo}@main is commit {done.commit}: snapshot {done.snapshot_key}")


def test_a_pinned_commit_finds_the_snapshot_its_branch_downloaded() -> None:
    # The index holds the snapshot under its commit's key, recorded by the branch's download.
    by_branch = succeeded("Qwen/Qwen2.5-VL-3B-Instruct")
    _, pinned = serve_plan(
        Path("examples/qwen2_5_vl.yaml"),
        model={"source": {"huggingface": {"repo": by_branch.repo, "revision": by_branch.commit}}},
    )
    assert pinned.download is not None and pinned.download.key != by_branch.key
    observed = Observed(now=NOW, resolved_commit=by_branch.commit, artifact=by_branch)
    found = weights_state(pinned, observed, None, 1, NO_GPUS)
    assert (found.ready, found.reason, found.location) == (True, "CacheHit", by_branch.snapshot_key)


def test_a_report_of_another_download_or_an_inconsistent_one_is_no_result() -> None:
    _, plan = serve_plan(Path("examples/qwen2_5_vl.yaml"))
    assert plan.download is not None
    good = succeeded("Qwen/Qwen2.5-VL-3B-Instruct")
    job = JobFacts(meta=Meta(name=f"download-{plan.download.key}"), succeeded=True)

    def state_of(message: str) -> tuple[bool, str]:
        pod = PodFacts(
            meta=Meta(name="d"), phase=PodPhase.SUCCEEDED, termination_message=message, exit_code=0
        )
        found = weights_state(plan, Observed(now=NOW, job=job, job_pods=(pod,)), None, 1, NO_GPUS)
        return found.ready, found.message

    ready, message = state_of(good.model_dump_json())
    assert ready and message.startswith(f"{good.repo}@main is commit {good.commit}")
    for wrong in (
        good.model_copy(update={"snapshot_key": "0" * 20}),
        good.model_copy(update={"repo": "Qwen/Qwen2.5-VL-7B-Instruct"}),
    ):
        ready, message = state_of(wrong.model_dump_json())
        assert not ready and message.endswith("ended without a result (no pod said why)")
