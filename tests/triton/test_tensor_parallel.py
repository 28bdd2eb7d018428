"""The multi-rank launch argv (tensor-parallel size 2) really starts under Open MPI, in leader mode, and its
ranks' tensorrt_llm doubles form one MPI world: on one host (one pod), and as a group across pods does,
each rank on a host name of its own (a UTS namespace), where the answer names the world; a world whose
second rank never joins fails rank 0's load within the bound."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from mmctl.main import main
from mmd_operator.plan.launch import Ports
from mmd_testbed.triton import media
from mmd_testbed.triton.doubles import codec
from mmd_testbed.triton.doubles.world import SECONDS_ENV
from mmd_testbed.triton.localserver import (
    MPI_ENV,
    ServerFailedError,
    TritonInstall,
    running,
)
from mmd_testbed.triton.serving import prepare, serve
from tests.triton.serving import load_example
from tests.triton.test_conformance import ask, image_request

EXAMPLE = "llava-tp2-fp8"


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def _shared_memory_of(pid: int) -> set[Path]:
    leader = psutil.Process(pid)
    return {
        Path(mapped.path)
        for process in (leader, *leader.children(recursive=True))
        for mapped in process.memory_maps()
        if mapped.path.startswith("/dev/shm/")
    }


def test_tp2_argv_starts_under_mpirun(
    triton_install: TritonInstall, tmp_path: Path, say: Callable[[str], None]
) -> None:
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun is missing: run `make triton-server` (installs openmpi-bin)", pytrace=False)
    plan = load_example(EXAMPLE)
    with serve(EXAMPLE, plan, triton_install, tmp_path, say) as served:
        # Exactly the operator's argv: only the tritonserver path, the repository and the ports differ.
        local, ports = served.launch.argv, served.ports
        assert len(plan.launch.argv) == len(local) and local[0] == "mpirun"
        substitutions = {
            "/opt/tritonserver/bin/tritonserver": str(triton_install.tritonserver),
            "--model-repository=/models": f"--model-repository={served.repository}",
            "--http-port=8000": f"--http-port={ports.http}",
            "--grpc-port=8001": f"--grpc-port={ports.grpc}",
            "--metrics-port=8002": f"--metrics-port={ports.metrics}",
        }
        assert [substitutions.get(arg, arg) for arg in plan.launch.argv] == list(local)
        assert local.count(":") == 2 and "--load-model=tensorrt_llm" in local
        tensors, _ = image_request(served, tmp_path, stream=True)
        seen = codec.parse_digest("".join(ask(served, "grpc", tensors)))
        assert seen["type"]["name"] == "llava" and seen["llm"]["streaming"] == "1"
        deadline = time.monotonic() + 30
        while "rank 1 waits for the leader" not in served.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, "rank 1's tensorrt_llm double never started loading"
            time.sleep(0.2)
        text = served.log.read_text(errors="replace")
        # Leader mode: rank 1 never finishes loading, so only rank 0 opened the shared ports.
        assert text.count("Started HTTPService") == 1
        assert "rank 0 waits" not in text
        # Both ranks' tensorrt_llm doubles joined one MPI world (world.py); on one host the answer above is
        # the single-rank one (no `world=` item: that needs ranks on more than one host).
        for rank in (0, 1):
            assert f"tensorrt_llm double: rank {rank} joined the MPI world: 2 ranks on 1 host: " in text
        assert "world" not in seen["llm"]
        assert served.process.pid is not None
        regions = _shared_memory_of(served.process.pid)
        assert regions, "the Python stubs map no region under /dev/shm"
    assert _processes_mentioning(str(served.repository)) == []
    # mpirun ends the ranks' stubs with SIGKILL, which leaves their regions: the stop removes them.
    assert [region for region in regions if region.exists()] == []


# Each rank in a UTS namespace of its own: its own host name, as in the pods of a LeaderWorkerSet group.
_AS_HOST = 'hostname "$0" && exec "$@"'
GROUP_HOSTS = ("llava-tp2-0", "llava-tp2-0-1")


def _group_world(
    triton_install: TritonInstall, workdir: Path, hosts: tuple[str, ...] = GROUP_HOSTS
) -> tuple[list[str], Ports, Path]:
    """The repository with doubles, and the leader's mpirun argv of a group across pods: the operator's
    `group_segments` (rank 1 without endpoints), each rank on its own host name."""
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun is missing: run `make triton-server` (installs openmpi-bin)", pytrace=False)
    if subprocess.run(["unshare", "--uts", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("no UTS namespaces here (unshare --uts needs root): one host name for every rank")
    _, launch, ports = prepare(load_example(EXAMPLE), triton_install, workdir)
    argv = ["mpirun", "--allow-run-as-root"]
    for index, (segment, host) in enumerate(zip(launch.group_segments, hosts, strict=True)):
        argv += [":"] * bool(index) + ["-n", str(segment.count), "unshare", "--uts", "sh", "-c", _AS_HOST]
        argv += [host, *segment.argv]
    return argv, ports, workdir / "server.log"


def test_a_world_across_two_hosts_answers_through_mmctl_infer_with_its_world(
    triton_install: TritonInstall,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    say: Callable[[str], None],
) -> None:
    argv, ports, log = _group_world(triton_install, tmp_path)
    with running(argv, http_port=ports.http, log_path=log, env=MPI_ENV, timeout=120):
        picture = media.image(tmp_path / "picture.jpg")
        url = f"grpc://127.0.0.1:{ports.grpc}"
        code = main(["infer", "--url", url, "--model-type", "llava", "--image", str(picture)])
        out, err = capsys.readouterr()
        assert code == 0, err
        say(f"\n  [triton] a group world on two hosts: mmctl infer printed {out.strip()!r}")
        # Rank 0 reached rank 1 on the other host: its answer says so, as the llm segment's last item.
        seen = codec.parse_digest(out.strip())
        assert seen["llm"]["world"] == f"2 ranks on 2 hosts: {' '.join(GROUP_HOSTS)}"
        assert out.strip().endswith(f",world=2 ranks on 2 hosts: {' '.join(GROUP_HOSTS)}")
        text = log.read_text(errors="replace")
        assert f"rank 1 joined the MPI world: 2 ranks on 2 hosts: {' '.join(GROUP_HOSTS)}" in text
        assert "rank 1 waits for the leader" in text and text.count("Started HTTPService") == 1


def test_a_world_whose_second_rank_never_joins_fails_the_load_within_the_bound(
    triton_install: TritonInstall, tmp_path: Path
) -> None:
    argv, ports, log = _group_world(triton_install, tmp_path)
    # Rank 1 never starts its tritonserver: rank 0's tensorrt_llm waits the bound, then fails its load.
    argv = [*argv[: argv.index(":")], ":", "-n", "1", "sleep", "300"]
    bound = 5
    started = time.monotonic()
    with (
        pytest.raises(ServerFailedError),
        running(argv, http_port=ports.http, log_path=log, env={**MPI_ENV, SECONDS_ENV: str(bound)}),
    ):
        pass
    took = time.monotonic() - started
    text = log.read_text(errors="replace")
    assert "the MPI world of 2 ranks did not form within 5 s: 1 of 2 ranks joined (rank 0, this one)" in text
    assert "failed to load 'tensorrt_llm'" in text
    assert bound <= took < bound + 60, took
