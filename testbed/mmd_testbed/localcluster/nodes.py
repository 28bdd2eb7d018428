"""Real nodes: kubelet, containerd, runc, CNI, kube-proxy and kube-router, in a network namespace each.

What one node is on disk and as processes (all under `<cluster dir>/nodes/<name>/`, logs in
`<cluster dir>/logs/<name>.<component>.log`):

- containerd v2 (its root, state, socket and runc's state), in the node's network namespace because the
  CNI plugins it calls build the pod network there: a `cni0` bridge with the node's pod /24 (from the
  controller manager's node IPAM), host-local IPAM, portmap, no masquerading, routes only to the cluster.
  `restrict_oom_score_adj`, as this machine refuses negative OOM scores; Debian's runc (crun refuses the
  hybrid cgroup layout); the sandbox image is the locally built pause.
- the kubelet: joined with a client certificate of `system:node:<name>` (Node authorizer, NodeRestriction),
  serving with a certificate of the cluster CA, webhook authentication and authorization, cgroupfs under a
  cgroup root of its own in every v1 hierarchy, `failCgroupV1: false`, the cluster DNS Service, image GC
  that never removes the imported images.
- kube-proxy (iptables mode, in the node's namespace), and kube-router's NetworkPolicy controller alone
  (`--run-router=false --run-service-proxy=false`), which is how kube-router runs beside another network.
- the fake GPU device plugin (`fakegpu`), registered with the kubelet through
  `<kubelet root>/device-plugins/kubelet.sock`: the node's `nvidia.com/gpu` and what a container given
  GPUs sees of them.

`down` kills every container of the node through its cgroups (the kubelet is stopped first so nothing is
restarted), stops the processes by pid, kills the node's containerd shims (found by their `-address`),
unmounts what the kubelet and containerd mounted under the node's directory, deletes the namespace and
the cgroups, and removes the kubelet's log links in /var/log/containers.

Imports: the standard library, PyYAML, and `network`, `nodebinaries`, `pki`, `processes`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mmd_testbed.localcluster import processes
from mmd_testbed.localcluster.network import ClusterNetwork
from mmd_testbed.localcluster.nodebinaries import NodeBinaries
from mmd_testbed.localcluster.pki import Credentials, issue_certificate, write_certificate_kubeconfig

CGROUP_MOUNTS = Path("/sys/fs/cgroup")
RUNC = Path(os.environ.get("MMD_RUNC", "/usr/sbin/runc"))
CONTAINER_LOG_LINKS = Path("/var/log/containers")
CNI_RESULTS = Path("/var/lib/cni/results")
# In start order; `fake-gpu` is the device plugin double (`fakegpu`), which registers with the kubelet.
NODE_COMPONENTS = ("containerd", "kubelet", "fake-gpu", "kube-proxy", "kube-router")
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
KUBE_PROXY_HEALTHZ_PORT = 10256
KUBE_ROUTER_HEALTH_PORT = 20244
# The fake GPU device plugin's /healthz: 200 while the kubelet watches its devices.
FAKE_GPU_HEALTH_PORT = 10290
# The label that tells real nodes from kwok's (kwok nodes carry `type: kwok`).
NODE_KIND_LABEL = "localcluster.mmd.dev/node-kind"
REAL = "real"
# What the host needs besides the built binaries (Debian packages in scripts/install-node-deps.sh).
HOST_COMMANDS = {
    "runc": "runc",
    "iptables": "iptables",
    "iptables-restore": "iptables",
    "ipset": "ipset",
    "nsenter": "util-linux",
    "ip": "iproute2",
    "mount": "mount",
}


@dataclass(frozen=True)
class RealNode:
    """Where one real node keeps its files, and its place in the cluster network."""

    name: str
    ordinal: int
    cluster_dir: Path
    network: ClusterNetwork

    @property
    def directory(self) -> Path:
        """Everything of this node."""
        return self.cluster_dir / "nodes" / self.name

    @property
    def address(self) -> str:
        """The node IP (kubelet, kube-proxy, kube-router listen here)."""
        return self.network.node_address(self.ordinal)

    @property
    def netns(self) -> str:
        """Its network namespace."""
        return self.network.netns(self.name)

    @property
    def containerd_socket(self) -> Path:
        """The containerd gRPC socket (the kubelet's CRI endpoint)."""
        return self.directory / "containerd" / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's --root-dir (pods' volumes, plugins, its own certificates)."""
        return self.directory / "kubelet" / "root"

    @property
    def pod_logs(self) -> Path:
        """Where the kubelet keeps container logs."""
        return self.directory / "kubelet" / "pod-logs"

    @property
    def cni_conf_dir(self) -> Path:
        """The containerd CNI configuration directory (empty until the node has its pod range)."""
        return self.directory / "cni" / "net.d"

    @property
    def cgroup_root(self) -> str:
        """The kubelet's cgroupRoot, of its own in every v1 hierarchy."""
        return f"/mmd{self.network.index}-{self.name}"

    def log(self, logs_dir: Path, component: str) -> Path:
        """The log file of one of the node's processes."""
        return logs_dir / f"{self.name}.{component}.log"

    def record_name(self, component: str) -> str:
        """The key of the component's process record in the cluster state."""
        return f"{self.name}/{component}"


# -- configuration -------------------------------------------------------------------------------------


def containerd_config(node: RealNode, binaries: NodeBinaries, sandbox_image: str) -> str:
    """The containerd config.toml (version 3) for `node`."""
    base = node.directory / "containerd"

    def q(value: object) -> str:
        return "'" + str(value) + "'"

    return "\n".join(
        [
            "version = 3",
            f"root = {q(base / 'root')}",
            f"state = {q(base / 'state')}",
            "disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.snapshotter.v1.blockfile',",
            "  'io.containerd.snapshotter.v1.erofs', 'io.containerd.differ.v1.erofs',",
            "  'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing']",
            "[grpc]",
            f"  address = {q(node.containerd_socket)}",
            "[ttrpc]",
            f"  address = {q(str(node.containerd_socket) + '.ttrpc')}",
            "[plugins]",
            "  [plugins.'io.containerd.internal.v1.opt']",
            f"    path = {q(base / 'opt')}",
            # Must stay enabled: without a verifier plugin the CRI and image transfer fail to load.
            "  [plugins.'io.containerd.image-verifier.v1.bindir']",
            f"    bin_dir = {q(base / 'image-verifier')}",
            "  [plugins.'io.containerd.cri.v1.images']",
            "    snapshotter = 'overlayfs'",
            "    [plugins.'io.containerd.cri.v1.images'.pinned_images]",
            f"      sandbox = {q(sandbox_image)}",
            "  [plugins.'io.containerd.cri.v1.runtime']",
            "    enable_selinux = false",
            "    disable_apparmor = true",
            # This machine refuses negative oom_score_adj (no CAP_SYS_RESOURCE); without this, every sandbox
            # fails in runc.
            "    restrict_oom_score_adj = true",
            "    netns_mounts_under_state_dir = true",
            "    [plugins.'io.containerd.cri.v1.runtime'.containerd]",
            "      default_runtime_name = 'runc'",
            "      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]",
            "        runtime_type = 'io.containerd.runc.v2'",
            "        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]",
            "          SystemdCgroup = false",
            f"          BinaryName = {q(RUNC)}",
            f"          Root = {q(base / 'runc')}",
            "    [plugins.'io.containerd.cri.v1.runtime'.cni]",
            f"      bin_dirs = [{q(binaries.cni_dir)}]",
            f"      conf_dir = {q(node.cni_conf_dir)}",
            "      max_conf_num = 1",
            "  [plugins.'io.containerd.grpc.v1.cri']",
            "    stream_server_address = '127.0.0.1'",
            "    stream_server_port = '0'",
            "",
        ]
    )


def cni_config(node: RealNode, pod_cidr: str) -> dict[str, Any]:
    """The node's CNI network: a bridge with `pod_cidr`, routes to the cluster only, hostPort mapping."""
    return {
        "cniVersion": "1.0.0",
        "name": node.network.cni_network,
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr}]],
                    # No default route: a pod reaches the cluster's /16 and nothing else.
                    "routes": [{"dst": node.network.supernet}],
                    "dataDir": str(node.directory / "cni" / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
        ],
    }


def kubelet_config(node: RealNode, credentials: Credentials, cert: Path, key: Path) -> dict[str, Any]:
    """The node's KubeletConfiguration."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        # kubelet 1.34 still runs on cgroup v1 when told to; later ones refuse by default.
        "failCgroupV1": False,
        "failSwapOn": False,
        "address": node.address,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": node.address,
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "tlsCertFile": str(cert),
        "tlsPrivateKeyFile": str(key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(credentials.ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDNS": [node.network.dns_service_ip],
        "clusterDomain": "cluster.local",
        # The node has no resolver of its own to pass on; pods resolve cluster names through CoreDNS.
        "resolvConf": "",
        "podLogsDir": str(node.pod_logs),
        "volumePluginDir": str(node.directory / "kubelet" / "volume-plugins"),
        "makeIPTablesUtilChains": False,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        # Imported images can never be pulled again: never collect them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "containerLogMaxSize": "10Mi",
        "maxPods": 110,
        "shutdownGracePeriod": "0s",
        "rotateCertificates": False,
    }


def kube_proxy_config(node: RealNode, kubeconfig: Path) -> dict[str, Any]:
    """The node's KubeProxyConfiguration (iptables mode in the node's network namespace)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node.name,
        "bindAddress": node.address,
        "healthzBindAddress": f"{node.address}:{KUBE_PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": "127.0.0.1:10249",
        "mode": "iptables",
        # Traffic to a Service from outside the pod range (the host, a node) is masqueraded, so replies
        # come back through the node that translated it.
        "clusterCIDR": node.network.cluster_cidr,
        "detectLocalMode": "ClusterCIDR",
        # The conntrack table size is not per namespace: leave the machine's settings alone.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"minSyncPeriod": "1s", "syncPeriod": "30s"},
    }


@dataclass(frozen=True)
class NodeFiles:
    """The configuration files `write_node_files` wrote."""

    containerd_config: Path
    kubelet_config: Path
    kubelet_kubeconfig: Path
    kube_proxy_config: Path
    kube_router_kubeconfig: Path


def write_node_files(
    node: RealNode, binaries: NodeBinaries, credentials: Credentials, server: str, sandbox_image: str
) -> NodeFiles:
    """Write every certificate, kubeconfig and config file of `node`; create its directories."""
    for directory in (
        "containerd",
        "cni/net.d",
        "cni/ipam",
        "kubelet/root",
        "kubelet/pod-logs",
        "kube-proxy",
    ):
        (node.directory / directory).mkdir(parents=True, exist_ok=True)
    (node.directory / "containerd" / "image-verifier").mkdir(exist_ok=True)
    name = node.name
    client = issue_certificate(
        credentials, f"node-{name}", common_name=f"system:node:{name}", organization="system:nodes"
    )
    serving = issue_certificate(credentials, f"kubelet-{name}", common_name=name, addresses=(node.address,))
    proxy = issue_certificate(credentials, f"kube-proxy-{name}", common_name="system:kube-proxy")
    router = issue_certificate(credentials, f"kube-router-{name}", common_name=KUBE_ROUTER_USER)
    files = NodeFiles(
        containerd_config=node.directory / "containerd" / "config.toml",
        kubelet_config=node.directory / "kubelet" / "config.yaml",
        kubelet_kubeconfig=node.directory / "kubelet" / "kubeconfig",
        kube_proxy_config=node.directory / "kube-proxy" / "config.yaml",
        kube_router_kubeconfig=node.directory / "kube-router.kubeconfig",
    )
    files.containerd_config.write_text(containerd_config(node, binaries, sandbox_image))
    write_certificate_kubeconfig(files.kubelet_kubeconfig, server, credentials, *client)
    files.kubelet_config.write_text(yaml.safe_dump(kubelet_config(node, credentials, *serving)))
    proxy_kubeconfig = node.directory / "kube-proxy" / "kubeconfig"
    write_certificate_kubeconfig(proxy_kubeconfig, server, credentials, *proxy)
    files.kube_proxy_config.write_text(yaml.safe_dump(kube_proxy_config(node, proxy_kubeconfig)))
    write_certificate_kubeconfig(files.kube_router_kubeconfig, server, credentials, *router)
    return files


def write_cni_config(node: RealNode, pod_cidr: str) -> None:
    """Give containerd the node's network (it watches the directory; the node turns Ready after this)."""
    target = node.cni_conf_dir / "10-mmd.conflist"
    scratch = target.with_suffix(".tmp")
    scratch.write_text(json.dumps(cni_config(node, pod_cidr), indent=2) + "\n")
    scratch.replace(target)


KUBE_ROUTER_USER = "system:kube-router"


def commands(node: RealNode, binaries: NodeBinaries, files: NodeFiles) -> dict[str, list[str]]:
    """The argv of each of the node's processes, in start order, each in the node's network namespace."""
    kubelet = [
        str(binaries.path("kubelet")),
        f"--config={files.kubelet_config}",
        f"--kubeconfig={files.kubelet_kubeconfig}",
        f"--root-dir={node.kubelet_root}",
        f"--hostname-override={node.name}",
        f"--node-ip={node.address}",
        "--v=1",
    ]
    kube_router = [
        str(binaries.path("kube-router")),
        f"--kubeconfig={files.kube_router_kubeconfig}",
        f"--hostname-override={node.name}",
        "--run-router=false",
        "--run-service-proxy=false",
        "--run-firewall=true",
        "--enable-cni=false",
        f"--service-cluster-ip-range={node.network.service_cidr}",
        f"--health-port={KUBE_ROUTER_HEALTH_PORT}",
        "--metrics-port=0",
        "--iptables-sync-period=1m",
        "--v=1",
    ]
    argv = {
        "containerd": [str(binaries.path("containerd")), f"--config={files.containerd_config}"],
        "kubelet": kubelet,
        "kube-proxy": [str(binaries.path("kube-proxy")), f"--config={files.kube_proxy_config}", "--v=1"],
        "kube-router": kube_router,
    }
    return {component: node.network.in_netns(node.name, command) for component, command in argv.items()}


def environment(binaries: NodeBinaries) -> dict[str, str]:
    """PATH with the node binaries first (containerd finds its shim on PATH, not Debian's older one)."""
    return {
        **os.environ,
        "PATH": f"{binaries.bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    }


def health_url(node: RealNode, component: str) -> str | None:
    """The HTTP health endpoint of a node component, reachable from the host (None for containerd)."""
    ports = {
        "kubelet": KUBELET_HEALTHZ_PORT,
        "kube-proxy": KUBE_PROXY_HEALTHZ_PORT,
        "kube-router": KUBE_ROUTER_HEALTH_PORT,
        "fake-gpu": FAKE_GPU_HEALTH_PORT,
    }
    if component not in ports:
        return None
    return f"http://{node.address}:{ports[component]}/healthz"


# -- host resources: cgroups, mounts -----------------------------------------------------------------------


def _hierarchies() -> list[Path]:
    return [path for path in sorted(CGROUP_MOUNTS.iterdir()) if path.is_dir()]


def create_cgroups(node: RealNode) -> None:
    """Create the node's cgroup root in every hierarchy (the kubelet refuses to start without)."""
    for hierarchy in _hierarchies():
        target = hierarchy / node.cgroup_root.lstrip("/")
        target.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":
            # A new cpuset has no CPUs or memory nodes until given its parent's.
            for name in ("cpuset.cpus", "cpuset.mems"):
                (target / name).write_text((hierarchy / name).read_text())


def kill_cgroup_processes(node: RealNode, timeout: float = 10.0) -> int:
    """SIGKILL every process in the node's cgroups (its containers); return how many there were."""
    deadline = time.monotonic() + timeout
    killed: set[int] = set()
    while time.monotonic() < deadline:
        pids: set[int] = set()
        for hierarchy in _hierarchies():
            root = hierarchy / node.cgroup_root.lstrip("/")
            # os.walk, not rglob: a cgroup removed while the tree is walked (a container just killed) is
            # skipped, where rglob raised FileNotFoundError and failed `down`.
            for directory, _, names in os.walk(root):
                if "cgroup.procs" in names:
                    with contextlib.suppress(OSError):
                        pids.update(
                            int(line) for line in (Path(directory) / "cgroup.procs").read_text().split()
                        )
        if not pids:
            return len(killed)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= pids
        time.sleep(0.1)
    return len(killed)


def remove_cgroups(node: RealNode) -> None:
    """Remove the node's cgroup trees, deepest first (only empty cgroups can go)."""
    for hierarchy in _hierarchies():
        root = hierarchy / node.cgroup_root.lstrip("/")
        if not root.is_dir():
            continue
        for directory in sorted(
            (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            root.rmdir()


def _mounts_under(directory: Path) -> list[str]:
    prefix = str(directory.resolve())
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4].replace("\\040", " ")
        if mount_point == prefix or mount_point.startswith(prefix + "/"):
            mounts.append(mount_point)
    return mounts


def unmount_all(directory: Path) -> int:
    """Unmount everything mounted at or below `directory`, deepest first; return how many mounts."""
    mounts = sorted(set(_mounts_under(directory)), key=len, reverse=True)
    for mount_point in mounts:
        subprocess.run(["umount", "-l", mount_point], capture_output=True, check=False)
    return len(mounts)


def kill_shims(node: RealNode) -> int:
    """SIGKILL the containerd shims of this node's containerd (they leave its process group on purpose)."""
    address = str(node.containerd_socket)
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and address.encode() in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                count += 1
    return count


def remove_log_links(node: RealNode) -> None:
    """Remove the kubelet's /var/log/containers links into this node's logs."""
    if not CONTAINER_LOG_LINKS.is_dir():
        return
    prefix = str(node.pod_logs)
    for link in CONTAINER_LOG_LINKS.iterdir():
        with contextlib.suppress(OSError):
            if link.is_symlink() and os.readlink(link).startswith(prefix):
                link.unlink()


def remove_cni_results(node: RealNode) -> None:
    """Remove libcni's cached results of this node's pod sandboxes (kept in /var/lib/cni/results by ID)."""
    sandboxes = node.directory / "containerd" / "root" / "io.containerd.grpc.v1.cri" / "sandboxes"
    if not CNI_RESULTS.is_dir() or not sandboxes.is_dir():
        return
    ids = {entry.name for entry in sandboxes.iterdir()}
    for result in CNI_RESULTS.iterdir():
        parts = result.name.rsplit("-", 2)
        if len(parts) == 3 and parts[1] in ids:
            result.unlink(missing_ok=True)


def stop_node(node: RealNode, records: dict[str, processes.ProcessRecord]) -> list[str]:
    """Stop `node` completely (see the module docstring); return the components that were running."""
    stopped = []
    if "kubelet" in records and processes.stop(records["kubelet"]):
        stopped.append("kubelet")
    kill_cgroup_processes(node)
    for component in ("fake-gpu", "kube-router", "kube-proxy", "containerd"):
        if component in records and processes.stop(records[component]):
            stopped.append(component)
    kill_shims(node)
    unmount_all(node.directory)
    remove_cgroups(node)
    remove_log_links(node)
    remove_cni_results(node)
    return stopped
