"""What a local cluster records of itself and reports: its files, its state file's content, its status.

`ClusterFiles` says where the cluster keeps each file in its directory; `ClusterState` is the JSON it keeps
there (ports, addresses, which binaries, the real nodes' network); `ClusterStatus` is what
`python -m mmd_testbed cluster status` prints. Imports the standard library, `network`, `objects`, `pki`
and `processes`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mmd_testbed.localcluster.network import ClusterNetwork
from mmd_testbed.localcluster.objects import NodePool
from mmd_testbed.localcluster.pki import Credentials
from mmd_testbed.localcluster.processes import ProcessRecord

# The names of real nodes (kwok's are gpu-node-N).
REAL_NODE_PREFIX = "real-node"


@dataclass(frozen=True)
class ClusterFiles:
    """Where a cluster keeps its files, all in its state directory."""

    state_dir: Path

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig."""
        return self.state_dir / "kubeconfig"

    @property
    def credentials(self) -> Credentials:
        """The credential files (`pki/`)."""
        return Credentials(self.state_dir / "pki")

    @property
    def state_file(self) -> Path:
        """Where `ClusterState` is recorded."""
        return self.state_dir / "state.json"

    @property
    def etcd_data(self) -> Path:
        """The data directory of etcd."""
        return self.state_dir / "etcd"

    @property
    def kwok_config(self) -> Path:
        """Kwok's configuration (its stages)."""
        return self.state_dir / "kwok.yaml"

    @property
    def audit_policy(self) -> Path:
        """The API server's audit policy."""
        return self.state_dir / "audit-policy.yaml"

    @property
    def logs_dir(self) -> Path:
        """The components' logs, kept across restarts."""
        return self.state_dir / "logs"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log of write requests (JSON lines; see `audit`)."""
        return self.logs_dir / "audit.log"

    def log(self, component: str) -> Path:
        """The log of `component`."""
        return self.logs_dir / f"{component}.log"


@dataclass
class ClusterState:
    """What `up` recorded in state.json."""

    ports: dict[str, int]
    processes: dict[str, ProcessRecord] = field(default_factory=dict)
    binaries: str = ""
    pool: NodePool = field(default_factory=NodePool)
    real_pool: NodePool = field(default_factory=lambda: NodePool(count=0, name_prefix=REAL_NODE_PREFIX))
    node_binaries: str = ""
    # The real nodes' device plugin double (`fakegpu`).
    fake_gpu: str = ""
    network_index: int | None = None

    @property
    def network(self) -> ClusterNetwork | None:
        """The node network, in a cluster with real nodes."""
        return None if self.network_index is None else ClusterNetwork(self.network_index)

    @property
    def address(self) -> str:
        """Where the API server listens: loopback, or the host's address on the node bridge."""
        network = self.network
        return "127.0.0.1" if network is None else network.host_address

    def to_json(self) -> dict[str, Any]:
        """Return the state as JSON data."""
        return {
            "ports": self.ports,
            "processes": {name: record.to_json() for name, record in self.processes.items()},
            "binaries": self.binaries,
            "pool": asdict(self.pool),
            "real_pool": asdict(self.real_pool),
            "node_binaries": self.node_binaries,
            "fake_gpu": self.fake_gpu,
            "network_index": self.network_index,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterState:
        """Read the state written by `to_json`."""
        return cls(
            ports={str(name): int(port) for name, port in data["ports"].items()},
            processes={name: ProcessRecord.from_json(record) for name, record in data["processes"].items()},
            binaries=str(data.get("binaries", "")),
            pool=NodePool(**data.get("pool", {})),
            real_pool=NodePool(**data.get("real_pool", {"count": 0, "name_prefix": REAL_NODE_PREFIX})),
            node_binaries=str(data.get("node_binaries", "")),
            fake_gpu=str(data.get("fake_gpu", "")),
            network_index=data.get("network_index"),
        )


@dataclass(frozen=True)
class ComponentStatus:
    """One line of `python -m mmd_testbed cluster status`."""

    name: str
    pid: int | None
    running: bool
    healthy: bool
    detail: str


@dataclass(frozen=True)
class ClusterStatus:
    """The state of every component, and of the nodes when the API answers."""

    components: list[ComponentStatus]
    nodes_ready: int | None
    nodes_total: int | None
    server: str | None

    @property
    def recorded(self) -> bool:
        """Return whether any component was ever started (state.json exists)."""
        return any(component.pid is not None for component in self.components)

    @property
    def healthy(self) -> bool:
        """Return whether every component runs and answers its health check."""
        return bool(self.components) and all(component.healthy for component in self.components)
