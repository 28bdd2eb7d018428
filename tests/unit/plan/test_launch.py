"""The launch argv for tensor-parallel world sizes."""

from __future__ import annotations

import pytest

from mmd_operator.api.validation import parse_spec
from mmd_operator.plan.launch import LAUNCH_ENV, Ports, launch_plan
from mmd_operator.plan.settings import resolve


def settings_for(model: dict[str, object], tp: int):  # type: ignore[no-untyped-def]
    spec = parse_spec(
        {
            "model": {"source": {"huggingface": {"repo": "org/m"}}, **model},
            "engine": {"tensorParallelSize": tp},
        }
    )
    return resolve(spec)


def test_world_size_one_runs_tritonserver_directly() -> None:
    settings = settings_for({"type": "llava"}, 1)
    plan = launch_plan(settings)
    assert plan.argv == plan.ranks[0]
    assert plan.argv[0] == "/opt/tritonserver/bin/tritonserver"
    assert f"--cuda-memory-pool-byte-size=0:{settings.limits.cuda_memory_pool_bytes}" in plan.argv
    assert "--disable-auto-complete-config" in plan.argv
    assert "--backend-config=python,shm-region-prefix-name=prefix0_" in plan.argv
    assert plan.env == LAUNCH_ENV


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_one_mpmd_segment_per_rank(tp: int) -> None:
    plan = launch_plan(settings_for({"type": "llava"}, tp))
    assert plan.argv[:2] == ("mpirun", "--allow-run-as-root")
    segments = " ".join(plan.argv[2:]).split(" : ")
    assert len(segments) == tp
    assert plan.argv[-1] == ":"
    for rank, segment in enumerate(segments):
        tokens = segment.rstrip(" :").split(" ")
        assert tokens[:2] == ["-n", "1"]
        assert tuple(tokens[2:]) == plan.ranks[rank]
        assert f"--backend-config=python,shm-region-prefix-name=prefix{rank}_" in tokens
        pool = [t for t in tokens if t.startswith("--cuda-memory-pool-byte-size")]
        explicit = [t for t in tokens if t.startswith("--model-control-mode")]
        if rank == 0:
            assert len(pool) == 1 and pool[0].startswith("--cuda-memory-pool-byte-size=0:")
            assert explicit == []
        else:
            assert pool == []
            assert explicit == ["--model-control-mode=explicit"]
            assert [t for t in tokens if t.startswith("--load-model")] == [
                "--load-model=tensorrt_llm",
                "--load-model=multimodal_encoders",
            ]


def test_whisper_ranks_load_whisper_bls_and_xcomposer2_ranks_only_the_llm() -> None:
    whisper = launch_plan(settings_for({"type": "whisper", "variant": "large-v3"}, 2))
    assert "--load-model=whisper_bls" in whisper.ranks[1]
    xcomposer2 = launch_plan(
        settings_for({"type": "internlm_xcomposer2", "lora": {"source": {"pvc": {"claimName": "a"}}}}, 2)
    )
    assert [t for t in xcomposer2.ranks[1] if t.startswith("--load-model")] == ["--load-model=tensorrt_llm"]


def test_paths_and_ports_can_be_chosen_for_local_runs() -> None:
    plan = launch_plan(
        settings_for({"type": "llava"}, 2),
        tritonserver="/usr/local/bin/tritonserver",
        model_repository="/tmp/repo",
        ports=Ports(http=18000, grpc=18001, metrics=18002),
        mpirun="/usr/bin/mpirun",
    )
    assert plan.argv[0] == "/usr/bin/mpirun"
    for rank in plan.ranks:
        assert rank[:5] == (
            "/usr/local/bin/tritonserver",
            "--model-repository=/tmp/repo",
            "--grpc-port=18001",
            "--http-port=18000",
            "--metrics-port=18002",
        )
