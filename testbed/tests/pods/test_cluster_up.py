"""`python -m mmd_testbed cluster up` with real nodes refuses a host or a directory that cannot run them,
naming the cause,
and a node that dies while starting fails `up` with its log and leaves nothing behind.

Each node has its own network namespace and the cluster picks a free /16 and free ports, so node ports
cannot collide with anything on the host (or with the session's own cluster, which runs meanwhile).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmd_testbed.localcluster import network, realnodes
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.objects import NodePool
from mmd_testbed.localcluster.realnodes import NodeStartError
from mmd_testbed.localcluster.state import REAL_NODE_PREFIX

pytestmark = pytest.mark.pods


def leftovers(state_dir: Path, index: int | None) -> list[str]:
    """Processes, mounts, namespaces, bridges and cgroups a cluster in `state_dir` left behind."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(state_dir) in argv:
                found.append(f"process {entry.name}: {argv.replace(chr(0), ' ')[:120]}")
    found += [f"mount {line.split()[4]}" for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if line.split()[4].startswith(str(state_dir))]  # fmt: skip
    for registration in network.REGISTRY.glob("*.json"):
        if json.loads(registration.read_text())["state_dir"] == str(state_dir):
            found.append(f"network registration {registration}")
    if index is not None:
        namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        found += [f"netns {line}" for line in namespaces.splitlines() if line.startswith(f"mmd{index}-")]
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        found += [
            f"link {line.split(':')[1].strip()}" for line in links.splitlines() if f"mmd{index}" in line
        ]
        found += [f"cgroup {path}" for path in Path("/sys/fs/cgroup").glob(f"*/mmd{index}-*")]
    return found


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A cluster directory short enough for the nodes' containerd sockets (pytest's own are not)."""
    path = Path(tempfile.mkdtemp(prefix="mmd-up-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_up_refuses_a_host_without_runc_before_starting_anything(short_dir: Path) -> None:
    tmp_path = short_dir
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmd_testbed",
            "cluster",
            "--dir",
            str(tmp_path),
            "up",
            "--nodes",
            "0",
            "--real-nodes",
            "1",
        ],
        env={**os.environ, "MMD_RUNC": "/nonexistent/runc"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith(
        "python -m mmd_testbed cluster up: cannot start real nodes: missing on the host: runc "
    ), result.stderr
    assert "Debian package runc" in result.stderr and "make node-deps" in result.stderr
    assert not (tmp_path / "state.json").exists()
    assert leftovers(tmp_path, None) == []


def test_preflight_names_the_kernel_features_a_node_needs(tmp_path: Path) -> None:
    proc, sys_root = tmp_path / "proc", tmp_path / "sys"
    (sys_root / "fs" / "cgroup" / "memory").mkdir(parents=True)
    (sys_root / "fs" / "cgroup" / "memory" / "cgroup.procs").write_text("")
    problems = realnodes.preflight(proc=proc, sys_root=sys_root)
    joined = "; ".join(problems)
    assert (
        "kernel feature missing: the cgroup v1 hierarchies cpu, cpuacct, cpuset, pids, devices, freezer"
        in joined
    )
    assert "kernel feature missing: bridge netfilter" in joined and "br_netfilter" in joined
    assert "kernel feature missing: network namespaces" in joined
    assert not any("memory" in problem for problem in problems)


def test_up_refuses_a_directory_too_long_for_containerd_sockets(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60)
    problems = realnodes.preflight(deep)
    assert len(problems) == 1 and "too long for the nodes' sockets" in problems[0], problems
    assert re.search(r"is \d+ bytes; a unix socket path has at most 104\): use a shorter --dir", problems[0])


def test_a_node_that_dies_while_starting_fails_up_and_leaves_nothing_behind(short_dir: Path) -> None:
    lines: list[str] = []
    state_dir = short_dir

    def say(line: str) -> None:
        lines.append(line)
        # containerd of the first node dies the moment it is started, as one that cannot start would.
        started = re.match(r"    started real-node-0 containerd \(pid (\d+),", line)
        if started:
            os.kill(int(started.group(1)), signal.SIGKILL)

    cluster = LocalCluster(state_dir, say=say, bind_to_parent=True)
    with pytest.raises(NodeStartError) as failure:
        cluster.up(NodePool(count=0), real_nodes=NodePool(count=1, name_prefix=REAL_NODE_PREFIX))
    message = str(failure.value)
    assert message.startswith("real-node-0: containerd exited during start-up; last lines of "), message
    assert "real-node-0.containerd.log" in message
    index = int(re.search(r"node network 10\.(\d+)\.0\.0/16", "\n".join(lines)).group(1))  # type: ignore[union-attr]
    assert any(line == "==> start-up failed; stopping what was started" for line in lines)
    assert leftovers(state_dir, index) == []
