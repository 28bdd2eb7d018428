"""The trtllm-serve double's MPI world under a real mpirun on this machine: the stand-in
`trtllm-llmapi-launch` runs rank 0's command and the LLM API worker on the others, the double checks
`tp_size` x `pp_size` against the world, joins it, and answers with it when it spans two hosts (each rank in a
UTS namespace of its own)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmd_testbed.triton.doubles.world import SECONDS_ENV
from mmd_testbed.trtllm_serve.launch import mpi_rank
from testbed.tests.mpi import PYTHON, mpi_env, mpirun, on_host, require_mpi, require_uts_namespaces, run
from testbed.tests.trtllm_serve.double import free_port, model_dir

LAUNCH = [PYTHON, "-m", "mmd_testbed.trtllm_serve.launch"]
SERVE = [PYTHON, "-m", "mmd_testbed.trtllm_serve"]


@pytest.fixture(autouse=True)
def _mpi() -> None:
    require_mpi()


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    return model_dir(root, "Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", "Qwen2.5-VL-72B-Instruct")


def test_the_launcher_reads_the_rank_where_the_real_one_does() -> None:
    assert mpi_rank({}) == 0
    assert mpi_rank({"OMPI_COMM_WORLD_RANK": "3"}) == 3
    assert mpi_rank({"SLURM_PROCID": "2", "OMPI_COMM_WORLD_RANK": "3"}) == 2
    assert mpi_rank({"PMI_RANK": "1"}) == 1


def test_the_launcher_runs_the_command_on_rank_0_and_the_worker_on_rank_1() -> None:
    world = [PYTHON, "-m", "mmd_testbed.triton.doubles.world", "--farewell"]
    done = run(mpirun([*LAUNCH, *world], [*LAUNCH, *world]), timeout=60)
    # Rank 0 ran the command (it printed its world, then ended it); rank 1 ran the worker, which joined
    # and quit when rank 0 ended the world: both in order, so mpirun exits 0.
    assert done.returncode == 0, done.stdout + done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [world["rank"] for world in printed] == [0]
    assert "0 run " in done.stderr and "1 launch worker ..." in done.stderr
    assert "[trtllm-serve double] worker rank 1 joined the MPI world: 2 ranks on 1 host: " in done.stderr
    assert "[trtllm-serve double] worker rank 1 quit" in done.stderr


def test_a_world_that_is_not_tp_times_pp_ranks_is_refused(qwen: Path) -> None:
    serve = [*LAUNCH, *SERVE, str(qwen), "--port", str(free_port()), "--tp_size", "2", "--pp_size", "2"]
    done = run(mpirun(serve, serve), timeout=60)
    assert done.returncode != 0
    refusal = (
        "RuntimeError: Cannot instantiate Generator for engine built for 4 ranks, while currently running "
        "on 2 ranks."
    )
    assert refusal in done.stderr, done.stderr


@pytest.fixture
def two_host_server(qwen: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    require_uts_namespaces()
    port = free_port()
    serve = [*LAUNCH, *SERVE, str(qwen), "--host", "127.0.0.1", "--port", str(port), "--tp_size", "2"]
    log = tmp_path / "mpirun.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            mpirun(on_host("pod-a", serve), on_host("pod-b", serve)),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=mpi_env(),
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}", log
    finally:
        process.terminate()  # mpirun passes SIGTERM on to every rank
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def test_rank_0_answers_with_the_world_across_two_hosts(two_host_server: tuple[str, Path]) -> None:
    url, log = two_host_server
    body = {"model": "qwen", "messages": [{"role": "user", "content": "what is this"}]}
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=20) as reply:
        answer = json.loads(reply.read())["choices"][0]["message"]["content"]
    assert (
        answer
        == "[trtllm-serve double, qwen2_5_vl] world: 2 ranks on 2 hosts: pod-a pod-b. prompt: what is this"
    )
    worker_said = "worker rank 1 joined the MPI world: 2 ranks on 2 hosts: pod-a pod-b"
    # mpirun forwards each rank's output on its own schedule: the worker's line may follow rank 0's answer.
    deadline = time.monotonic() + 20
    while worker_said not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    text = log.read_text()
    assert "rank 0 joined the MPI world: 2 ranks on 2 hosts: pod-a pod-b" in text
    assert worker_said in text


def test_rank_0_fails_loudly_when_the_world_does_not_form_in_time(qwen: Path) -> None:
    serve = [*LAUNCH, *SERVE, str(qwen), "--port", str(free_port()), "--tp_size", "2"]
    started = time.monotonic()
    done = run(mpirun(serve, ["sleep", "60"]), timeout=60, extra={SECONDS_ENV: "3"})
    assert done.returncode != 0 and time.monotonic() - started < 30
    message = "RuntimeError: the MPI world of 2 ranks did not form within 3 s: 1 of 2 ranks joined (rank 0"
    assert message in done.stderr, done.stderr
