"""The network of a local cluster with real nodes: one private /16, a host bridge, a namespace per node.

Each real node is a network namespace of its own, as a separate machine would be: containerd, the kubelet,
kube-proxy and kube-router run in it (only the network namespace is entered, so mounts stay shared with
the host and the kubelet and containerd see the same volumes). A veth pair joins each node's `eth0` to
the cluster's bridge on the host, which holds the host's address; the API server listens there so that
pods reach it through the `kubernetes` Service. Every rule kube-proxy and kube-router write lands in the
node's own namespace: nothing touches the host's iptables, and deleting the namespaces removes it all.

Addresses, for the cluster's index `i` (a free one in 200-239 is picked at `up`):

| what | where |
|---|---|
| host (API server) | 10.i.0.1 on bridge `mmd<i>` |
| node `n` | 10.i.0.(10+n) on its `eth0` |
| pods | 10.i.128.0/17, a /24 per node from the controller manager's node-IPAM |
| Services | 10.i.96.0/20; `kubernetes` at .1, cluster DNS at .10 |

There is no default route anywhere: pods and nodes reach only 10.i.0.0/16, so nothing leaves the
machine. Nodes route each other's pod ranges over the bridge (host-gw, no overlay); the host routes them
too, and the Service range through the first node, whose kube-proxy forwards (and masquerades) it, so a
test on the host reaches a ClusterIP as a client outside the cluster would through a router.

A machine-wide registry (`/run/mmd-localcluster/`) records which cluster directory owns which index; a
network whose cluster has no live process any more is reclaimed at the next allocation, so a killed test
run leaks nothing for long.

Imports: the standard library and `processes`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mmd_testbed.localcluster.processes import exclusive_lock

REGISTRY = Path("/run/mmd-localcluster")
INDEXES = range(200, 240)
CNI_RESULTS = Path("/var/lib/cni/results")


class NetworkError(RuntimeError):
    """The node network could not be set up; the message names the command and what it said."""


@dataclass(frozen=True)
class ClusterNetwork:
    """The addresses and interface names of one cluster's network."""

    index: int

    @property
    def supernet(self) -> str:
        """Everything of the cluster: nodes, pods, Services."""
        return f"10.{self.index}.0.0/16"

    @property
    def bridge(self) -> str:
        """The host bridge every node's veth is attached to."""
        return f"mmd{self.index}"

    @property
    def host_address(self) -> str:
        """The host's address on the bridge; the API server listens here."""
        return f"10.{self.index}.0.1"

    @property
    def prefix_length(self) -> int:
        """The node subnet's prefix length (10.i.0.0/24)."""
        return 24

    def node_address(self, ordinal: int) -> str:
        """The address of node number `ordinal` (its kubelet's node IP)."""
        return f"10.{self.index}.0.{10 + ordinal}"

    @property
    def cluster_cidr(self) -> str:
        """The pod range, split into a /24 per node by the controller manager."""
        return f"10.{self.index}.128.0/17"

    @property
    def service_cidr(self) -> str:
        """The Service ClusterIP range."""
        return f"10.{self.index}.96.0/20"

    @property
    def kubernetes_service_ip(self) -> str:
        """The ClusterIP of `default/kubernetes` (the first of the range)."""
        return f"10.{self.index}.96.1"

    @property
    def dns_service_ip(self) -> str:
        """The ClusterIP of the cluster DNS Service."""
        return f"10.{self.index}.96.10"

    def netns(self, node: str) -> str:
        """The network namespace of `node` (a file under /run/netns)."""
        return f"mmd{self.index}-{node}"

    def netns_path(self, node: str) -> Path:
        """The path `nsenter --net=` takes."""
        return Path("/run/netns") / self.netns(node)

    def veth(self, ordinal: int) -> str:
        """The host end of node `ordinal`'s veth pair."""
        return f"mmd{self.index}v{ordinal}"

    @property
    def cni_network(self) -> str:
        """The CNI network name (libcni caches results under it in /var/lib/cni/results)."""
        return f"mmd{self.index}"

    def in_netns(self, node: str, command: list[str]) -> list[str]:
        """`command` run in `node`'s network namespace only (mounts stay the host's)."""
        return ["nsenter", f"--net={self.netns_path(node)}", "--", *command]


def _run(command: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise NetworkError(f"`{' '.join(command)}` exited {result.returncode}: {result.stderr.strip()}")
    return result


def _networks_in_use() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Every IPv4 prefix on the host's interfaces and in its routing table."""
    used: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for entry in json.loads(_run(["ip", "-j", "-4", "addr"]).stdout or "[]"):
        for address in entry.get("addr_info", []):
            used.append(ipaddress.ip_network(f"{address['local']}/{address['prefixlen']}", strict=False))
    for route in json.loads(_run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]"):
        destination = route.get("dst", "")
        if destination and destination != "default" and not destination.startswith(("127.", "broadcast")):
            with contextlib.suppress(ValueError):
                used.append(ipaddress.ip_network(destination if "/" in destination else f"{destination}/32"))
    return used


def _is_alive(pid: object) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _registration(index: int) -> Path:
    return REGISTRY / f"{index}.json"


def allocate(state_dir: Path, is_stale: Callable[[Path], bool]) -> ClusterNetwork:
    """Pick a free index for the cluster in `state_dir`, register it and create its host bridge.

    Registrations whose cluster `is_stale` (no live process) are torn down first, unless the process that
    registered one still lives: a cluster starting up has no process of its own yet.
    """
    with exclusive_lock(REGISTRY / ".lock"):
        for path in sorted(REGISTRY.glob("*.json")):
            registration = json.loads(path.read_text())
            owner = Path(registration["state_dir"])
            if owner == state_dir or (not _is_alive(registration.get("pid")) and is_stale(owner)):
                teardown(ClusterNetwork(int(path.stem)))
        used = _networks_in_use()
        registered = {int(path.stem) for path in REGISTRY.glob("*.json")}
        for index in INDEXES:
            network = ClusterNetwork(index)
            supernet = ipaddress.ip_network(network.supernet)
            if index in registered or any(supernet.overlaps(prefix) for prefix in used):
                continue
            registration = {"state_dir": str(state_dir), "pid": os.getpid()}
            _registration(index).write_text(json.dumps(registration) + "\n")
            _create_bridge(network)
            return network
    raise NetworkError(
        f"no free private /16 among 10.{INDEXES.start}-{INDEXES.stop - 1}.0.0 for the node network "
        f"(each is used by an interface, a route or another local cluster; see {REGISTRY})"
    )


def _create_bridge(network: ClusterNetwork) -> None:
    _run(["ip", "link", "add", network.bridge, "type", "bridge"])
    _run(["ip", "addr", "add", f"{network.host_address}/{network.prefix_length}", "dev", network.bridge])
    _run(["ip", "link", "set", network.bridge, "up"])


def add_node(network: ClusterNetwork, node: str, ordinal: int) -> None:
    """Create `node`'s namespace with `eth0` on the bridge at its address, forwarding on, no default route."""
    namespace, veth = network.netns(node), network.veth(ordinal)
    _run(["ip", "netns", "add", namespace])
    _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace])
    _run(["ip", "link", "set", veth, "master", network.bridge, "up"])
    address = f"{network.node_address(ordinal)}/{network.prefix_length}"
    _run(["ip", "-n", namespace, "addr", "add", address, "dev", "eth0"])
    _run(["ip", "-n", namespace, "link", "set", "eth0", "up"])
    _run(["ip", "-n", namespace, "link", "set", "lo", "up"])
    # Per-namespace settings a node needs: it routes its pods' traffic, and bridged pod traffic passes
    # through iptables so kube-proxy's and kube-router's rules see it (both are per namespace here).
    for key in (
        "net.ipv4.ip_forward=1",
        "net.bridge.bridge-nf-call-iptables=1",
        "net.ipv4.conf.all.rp_filter=0",
    ):
        _run(network.in_netns(node, ["sysctl", "-q", "-w", key]))


def set_routes(network: ClusterNetwork, pod_ranges: dict[str, tuple[int, str]]) -> None:
    """Route every node's pod range (name -> (ordinal, CIDR)) from the host and from every other node.

    The host also routes the Service range through the first node, whose kube-proxy forwards it.
    """
    for node, (ordinal, cidr) in pod_ranges.items():
        gateway = network.node_address(ordinal)
        _run(["ip", "route", "replace", cidr, "via", gateway, "dev", network.bridge])
        for other in pod_ranges:
            if other != node:
                _run(
                    [
                        "ip",
                        "-n",
                        network.netns(other),
                        "route",
                        "replace",
                        cidr,
                        "via",
                        gateway,
                        "dev",
                        "eth0",
                    ]
                )
    if pod_ranges:
        route_services(network, [ordinal for ordinal, _ in pod_ranges.values()])


def route_services(network: ClusterNetwork, ordinals: list[int]) -> None:
    """Send the host's requests to Service addresses through one of the nodes `ordinals`.

    That node's kube-proxy rules take them on, as a load balancer in front of a cluster sends requests to
    a node it finds alive. It stays the node they go through now when that is one of `ordinals`: a
    connection moved to another node's rules would be reset, since that node has no record of it (its
    address translation was made on the first). Else the first of them.
    """
    shown = _run(["ip", "-j", "route", "show", network.service_cidr], check=False).stdout or "[]"
    now = {entry.get("gateway") for entry in json.loads(shown)}
    if now & {network.node_address(ordinal) for ordinal in ordinals}:
        return
    gateway = network.node_address(min(ordinals))
    _run(["ip", "route", "replace", network.service_cidr, "via", gateway, "dev", network.bridge])


def cut_off(network: ClusterNetwork, ordinal: int, alive: list[int]) -> None:
    """Take node `ordinal` off the wire, as a machine that lost power is.

    Its link goes down, so its address and its pods' answer nothing and it forwards nothing (its stale
    rules included); the host's Service traffic goes through the first of the nodes `alive`.
    """
    _run(["ip", "link", "set", network.veth(ordinal), "down"])
    if alive:
        route_services(network, alive)


def reconnect(network: ClusterNetwork, ordinal: int) -> None:
    """Put node `ordinal` back on the wire (`route_services` may give it the host's Service traffic again)."""
    _run(["ip", "link", "set", network.veth(ordinal), "up"])


def remove_node(network: ClusterNetwork, node: str, ordinal: int) -> None:
    """Delete `node`'s namespace (its rules and routes go with it) and its veth pair.

    The veth is deleted from the host's end: a namespace lives on in the kernel while anything still
    refers to it, and its end of the pair with it.
    """
    _run(["ip", "netns", "delete", network.netns(node)], check=False)
    _run(["ip", "link", "delete", network.veth(ordinal)], check=False)


def teardown(network: ClusterNetwork) -> None:
    """Delete every namespace of the cluster, its bridge, host routes, CNI cache entries and registration."""
    listing = _run(["ip", "-j", "netns", "list"], check=False).stdout or "[]"
    for entry in json.loads(listing):
        if entry.get("name", "").startswith(f"mmd{network.index}-"):
            _run(["ip", "netns", "delete", entry["name"]], check=False)
    for entry in json.loads(
        _run(["ip", "-j", "link", "show", "master", network.bridge], check=False).stdout or "[]"
    ):
        _run(["ip", "link", "delete", entry["ifname"]], check=False)
    # Routes via the bridge go with it.
    _run(["ip", "link", "delete", network.bridge], check=False)
    if CNI_RESULTS.is_dir():
        for result in CNI_RESULTS.glob(f"{network.cni_network}-*"):
            result.unlink(missing_ok=True)
    _registration(network.index).unlink(missing_ok=True)
