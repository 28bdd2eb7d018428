"""The doubles' MPI world (mmd_testbed.triton.doubles.world) under a real mpirun on this machine: a world of
two ranks forms and rank 0 reports both, on one host or (each rank in a UTS namespace of its own) on two; a
world whose second rank never joins, or joins MPI but never answers, fails loudly within the bound."""

from __future__ import annotations

import json
import time

import pytest

from mmd_testbed.triton.doubles.world import World
from testbed.tests.mpi import PYTHON, mpirun, on_host, require_mpi, require_uts_namespaces, run

WORLD = [PYTHON, "-m", "mmd_testbed.triton.doubles.world"]


@pytest.fixture(autouse=True)
def _mpi() -> None:
    require_mpi()


def _worlds(stdout: str) -> dict[int, dict[str, object]]:
    printed = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {int(world["rank"]): world for world in printed}


def test_a_world_of_two_ranks_forms_and_rank_0_reports_both() -> None:
    done = run(mpirun([*WORLD, "--farewell"], [*WORLD, "--farewell"]), timeout=60)
    # Rank 0 ended the world in order (farewell, finalise on both ranks): mpirun exits 0.
    assert done.returncode == 0, done.stdout + done.stderr
    worlds = _worlds(done.stdout)
    assert sorted(worlds) == [0, 1]
    assert worlds[0]["size"] == 2 and worlds[0]["hosts"] == worlds[1]["hosts"]
    host = str(worlds[0]["hosts"][0])  # type: ignore[index]
    assert worlds[0]["summary"] == f"2 ranks on 1 host: {host}"


def test_a_world_across_two_hosts_names_both() -> None:
    require_uts_namespaces()
    done = run(
        mpirun(on_host("pod-a", [*WORLD, "--farewell"]), on_host("pod-b", [*WORLD, "--farewell"])), timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    worlds = _worlds(done.stdout)
    assert worlds[0]["hosts"] == ["pod-a", "pod-b"] == worlds[1]["hosts"]
    assert worlds[0]["summary"] == "2 ranks on 2 hosts: pod-a pod-b"


def test_a_world_whose_second_rank_never_joins_fails_within_the_bound() -> None:
    started = time.monotonic()
    done = run(mpirun([*WORLD, "--seconds", "3"], ["sleep", "60"]), timeout=60)
    took = time.monotonic() - started
    assert done.returncode != 0
    message = (
        "WorldError: the MPI world of 2 ranks did not form within 3 s: 1 of 2 ranks joined (rank 0, this one)"
    )
    assert message in done.stderr, done.stderr
    # Rank 0 gave up at the bound (mpirun then ended the sleeping rank), not when the other rank ended.
    assert 3 <= took < 30, took


def test_a_rank_that_initialises_mpi_but_never_answers_is_named() -> None:
    code = (
        "import ctypes, time; from mmd_testbed.triton.doubles import world; "
        "world._libmpi().MPI_Init_thread(None, None, 3, ctypes.byref(ctypes.c_int())); time.sleep(60)"
    )
    silent = [PYTHON, "-c", code]
    done = run(mpirun([*WORLD, "--seconds", "3"], silent), timeout=60)
    assert done.returncode != 0
    assert "did not form within 3 s: 1 of 2 ranks joined (rank 1 did not answer rank 0)" in done.stderr, (
        done.stderr
    )


def test_outside_mpi_the_world_is_this_process_alone() -> None:
    from mmd_testbed.triton.doubles import world

    alone = world.join(environ={})
    assert alone == World(rank=0, hosts=alone.hosts) and alone.size == 1 and not alone.spans_hosts
    assert World(rank=0, hosts=("a", "a", "b", "b")).summary() == "4 ranks on 2 hosts: a b"
