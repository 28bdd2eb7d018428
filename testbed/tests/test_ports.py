"""The port picker: below the kernel's ephemeral range, never a bound port, never one given twice."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mmd_testbed import ports


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ports.json"
    monkeypatch.setattr(ports, "_LEDGER", path)
    return path


def test_ports_lie_below_the_ephemeral_range_and_are_distinct() -> None:
    ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    picked = ports.free_ports(50)
    assert len(set(picked)) == 50
    assert all(15000 <= port < ephemeral_start for port in picked), picked


def four_free_ports_in_a_row() -> range:
    """Four consecutive ports nothing listens on now: other workers' servers hold ports of the range."""
    for start in random.sample(ports._candidates(), 200):
        block = range(start, start + 4)
        if all(ports._bindable(port) for port in block):
            return block
    raise AssertionError("no four free ports in a row below the ephemeral range")


def test_a_port_given_recently_is_not_given_again_until_its_hold_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    block = four_free_ports_in_a_row()
    monkeypatch.setattr(ports, "_candidates", lambda: block)
    first = ports.free_ports(4)
    with pytest.raises(OSError, match=f"no 1 free loopback ports in {block.start}-{block.stop - 1}"):
        ports.free_port()
    monkeypatch.setattr(ports, "_HELD_SECONDS", 0.0)
    assert ports.free_port() in first


def test_a_port_something_listens_on_is_never_given(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        monkeypatch.setattr(ports, "_candidates", lambda: range(taken, taken + 1))
        with pytest.raises(OSError, match=f"no 1 free loopback ports in {taken}-{taken}"):
            ports.free_port()


def test_processes_picking_at_once_get_disjoint_ports(ledger: Path) -> None:
    # Each process takes 20 ports through the same ledger at the same time.
    program = (
        "import sys; from pathlib import Path; from mmd_testbed import ports; "
        "ports._LEDGER = Path(sys.argv[1]); print(*ports.free_ports(20))"
    )
    runs = [
        subprocess.Popen([sys.executable, "-c", program, str(ledger)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    given = [int(port) for run in runs for port in run.communicate(timeout=60)[0].split()]
    assert all(run.returncode == 0 for run in runs)
    assert len(given) == 80 and len(set(given)) == 80
