"""Loopback ports for the test bed's servers, safe to hand out while many test processes run.

The kernel's own pick (`bind(("127.0.0.1", 0))`) comes from its ephemeral range, the same range it
draws the source port of every outgoing connection from: between the pick and the server's bind,
any client on the machine (a kubelet, an API server's watch, a test's request) may take that port,
and the server fails with "address already in use". So the ports handed out here lie below the
ephemeral range, and a machine-wide ledger (under a file lock) remembers the recent ones so that two
test processes never get the same port before either has bound it.

Imports: the standard library only.
"""

from __future__ import annotations

import fcntl
import json
import random
import socket
import tempfile
import time
from pathlib import Path

_LEDGER = Path(tempfile.gettempdir()) / "mmd-ports.json"
# Longer than any server of the test bed takes from being given its port to listening on it.
_HELD_SECONDS = 600.0
_LOWEST = 15000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _candidates() -> range:
    """The ports from `_LOWEST` up to the start of the kernel's ephemeral range."""
    try:
        ephemeral_start = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_start = 32768
    return range(_LOWEST, max(ephemeral_start, _LOWEST + 1000))


def _bindable(port: int) -> bool:
    # The wildcard address conflicts with a listener on any address, loopback included.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """`count` distinct ports nothing listens on, and that no other caller got in the last minutes."""
    candidates = _candidates()
    _LEDGER.touch(exist_ok=True)
    with _LEDGER.open("r+") as ledger:
        fcntl.flock(ledger, fcntl.LOCK_EX)
        now = time.time()
        try:
            given: dict[str, float] = json.loads(ledger.read() or "{}")
        except ValueError:
            given = {}
        recent = {int(port) for port, at in given.items() if now - at < _HELD_SECONDS}
        picked: list[int] = []
        # In random order, so that two ledgers (another temporary directory) seldom collide.
        for port in random.sample(candidates, len(candidates)):
            if len(picked) == count:
                break
            if port not in recent and _bindable(port):
                picked.append(port)
        if len(picked) < count:
            raise OSError(f"no {count} free loopback ports in {candidates.start}-{candidates.stop - 1}")
        kept = {str(port): at for port, at in given.items() if int(port) in recent}
        kept.update({str(port): now for port in picked})
        ledger.seek(0)
        ledger.truncate()
        ledger.write(json.dumps(kept))
        return picked


def free_port() -> int:
    """One port, as `free_ports`."""
    return free_ports(1)[0]
