"""Bring a cluster's real nodes up and down: host checks, processes, node objects, routes, add-ons.

`start` runs, for each node, in order: its network namespace and cgroups, containerd (then the add-on
images are imported into it), the kubelet (which registers the node with its certificate) and the fake GPU
device plugin (`fakegpu`), which registers `nvidia.com/gpu` with that kubelet: the node's capacity comes
from the kubelet's device manager, as on a GPU node, and a container given GPUs learns which (their IDs,
name and compute capability, in its environment); as the DRA driver `gpu.nvidia.com` it publishes the
node's ResourceSlice (its DeviceClass is applied first). Then, as GPU feature discovery and a network plugin
would on a real cluster: the node gets the GPU labels of its model (`NodePool.model_of`, one model per
pool or one per node), and its CNI configuration once the controller manager has given it a pod range;
the host and the other nodes route that range to it. kube-proxy and kube-router follow, and last the
add-ons (CoreDNS, the local-path provisioner). Each step waits for its component's health, and a
component that dies during start-up fails `up` with its log's last lines.

`preflight` names what the host lacks before anything starts: root, the Debian packages (runc,
iptables, ipset), cgroup v1 hierarchies, bridge netfilter, network namespaces.

Imports: the standard library, the kubernetes client, and this package's `addons`, `fakegpu`, `network`,
`nodebinaries`, `nodes`, `objects`, `ocilayout`, `pki`, `processes`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes import dynamic
from kubernetes.client.exceptions import ApiException

from mmd_operator.vocabulary.kinds import GPU_RESOURCE
from mmd_testbed.localcluster import addons, fakegpu, network, nodes, processes
from mmd_testbed.localcluster.network import ClusterNetwork
from mmd_testbed.localcluster.nodebinaries import NodeBinaries
from mmd_testbed.localcluster.nodes import RealNode
from mmd_testbed.localcluster.objects import GpuModel, NodePool, gpu_labels
from mmd_testbed.localcluster.ocilayout import import_image
from mmd_testbed.localcluster.pki import Credentials, issue_certificate

FIELD_MANAGER = "mmd-localcluster"
_LOG_TAIL_LINES = 30


class NodeStartError(RuntimeError):
    """A real node could not start; the message names the cause (and a log to read)."""


class Host(Protocol):
    """What the cluster gives the node code: its directory, credentials, API access and printer."""

    state_dir: Path
    say: Callable[[str], None]
    bind_to_parent: bool

    @property
    def credentials(self) -> Credentials:
        """The cluster's credential files."""

    @property
    def logs_dir(self) -> Path:
        """Where component logs go."""

    def api_client(self, token: str | None = None) -> k8s.ApiClient:
        """An admin client (the caller closes it)."""


# containerd refuses a unix socket path over 104 bytes (the BSD sun_path size, applied on Linux too; Linux
# allows 107). The longest a node makes are containerd's ttrpc socket beside the gRPC one and the fake GPU
# plugin's in the kubelet's plugin registry.
SOCKET_PATH_LIMIT = 104


def preflight(
    state_dir: Path | None = None, proc: Path = Path("/proc"), sys_root: Path = Path("/sys")
) -> list[str]:
    """What this host (or the cluster directory `state_dir`) lacks to run real nodes, one sentence each."""
    problems = []
    if state_dir is not None:
        node = RealNode("real-node-0", 0, state_dir.resolve(), ClusterNetwork(0))
        ttrpc = node.containerd_socket.with_name(node.containerd_socket.name + ".ttrpc")
        socket = max(ttrpc, fakegpu.registration_socket(node), key=lambda path: len(str(path)))
        if len(str(socket)) > SOCKET_PATH_LIMIT:
            problems.append(
                f"the cluster directory {state_dir} is too long for the nodes' sockets "
                f"({socket} is {len(str(socket))} bytes; "
                f"a unix socket path has at most {SOCKET_PATH_LIMIT}): "
                "use a shorter --dir"
            )
    if os.geteuid() != 0:
        problems.append("real nodes need root (network namespaces, cgroups, mounts); run as root")
    missing: dict[str, list[str]] = {}
    for command, package in nodes.HOST_COMMANDS.items():
        found = shutil.which(command, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        if command == "runc":
            found = str(nodes.RUNC) if os.access(nodes.RUNC, os.X_OK) else None
        if found is None:
            missing.setdefault(package, []).append(command)
    if missing:
        listed = ", ".join(
            f"{' and '.join(commands)} (Debian package {package})" for package, commands in missing.items()
        )
        problems.append(
            f"missing on the host: {listed}; `make node-deps` (scripts/install-node-deps.sh) installs them"
        )
    cgroups = sys_root / "fs" / "cgroup"
    needed = ("cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer")
    absent = [name for name in needed if not (cgroups / name / "cgroup.procs").is_file()]
    if absent:
        problems.append(
            f"kernel feature missing: the cgroup v1 hierarchies {', '.join(absent)} "
            f"are not mounted under {cgroups} "
            "(the kubelet runs here with the cgroupfs driver on cgroup v1)"
        )
    if not (proc / "sys" / "net" / "bridge" / "bridge-nf-call-iptables").exists():
        problems.append(
            f"kernel feature missing: bridge netfilter ({proc}/sys/net/bridge/bridge-nf-call-iptables); "
            "load br_netfilter so kube-proxy and kube-router see bridged pod traffic"
        )
    if not (proc / "self" / "ns" / "net").exists():
        problems.append("kernel feature missing: network namespaces (CONFIG_NET_NS)")
    return problems


def _tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:])
    except OSError:
        return "(no log)"


class NodeRunner:
    """Starts, checks and stops the real nodes of one cluster."""

    def __init__(
        self,
        host: Host,
        cluster_network: ClusterNetwork,
        pool: NodePool,
        binaries: NodeBinaries,
        fake_gpu: Path,
        records: dict[str, processes.ProcessRecord],
        save: Callable[[], None],
    ) -> None:
        """Run the nodes of `pool` with `binaries` and the device plugin double `fake_gpu`.

        `records` is the cluster state's process table; `save` persists it after every start.
        """
        self.host = host
        self.network = cluster_network
        self.pool = pool
        self.binaries = binaries
        self.fake_gpu = fake_gpu
        self.records = records
        self.save = save

    @property
    def nodes(self) -> list[RealNode]:
        """The real nodes of the pool."""
        return [
            RealNode(name, ordinal, self.host.state_dir, self.network)
            for ordinal, name in enumerate(self.pool.node_names())
        ]

    @staticmethod
    def issue_apiserver_certificate(credentials: Credentials) -> None:
        """The API server's client certificate towards the kubelets (logs, exec, port-forward)."""
        issue_certificate(
            credentials,
            "apiserver-kubelet-client",
            common_name="kube-apiserver-kubelet-client",
            organization="system:masters",
        )

    def server(self, port: int) -> str:
        """The API server's URL as nodes and pods reach it."""
        return f"https://{self.network.host_address}:{port}"

    # -- start ------------------------------------------------------------------------------------

    def start(self, api_port: int, timeout: float) -> None:
        """Start every node, then the add-ons; wait until all are Ready."""
        say = self.host.say
        started = time.monotonic()
        credentials = self.host.credentials
        images = addons.write_addon_images(self.binaries, self.host.state_dir / "images")
        names = addons.image_names(self.binaries)
        with self.host.api_client() as api_client:
            apply(api_client, [*addons.kube_router_rbac(), fakegpu.device_class()])
        for node in self.nodes:
            say(f"--> real node {node.name} at {node.address} (network namespace {node.netns})")
            network.add_node(self.network, node.name, node.ordinal)
            nodes.create_cgroups(node)
            files = nodes.write_node_files(
                node, self.binaries, credentials, self.server(api_port), names["pause"]
            )
            argv = nodes.commands(node, self.binaries, files)
            self._start(node, "containerd", argv["containerd"])
            self._wait_containerd(node, timeout)
            for archive in images.values():
                import_image(self.binaries.path("ctr"), node.containerd_socket, archive)
            self._start(node, "kubelet", argv["kubelet"])
            # It registers as soon as the kubelet's socket answers.
            self._start(node, fakegpu.COMPONENT, self._plugin_command(node))
        with self.host.api_client() as api_client:
            core = k8s.CoreV1Api(api_client)
            ranges = {}
            for node in self.nodes:
                self._wait(node, "kubelet", partial(_exists, core, node.name), "node registered", timeout)
                self._label(core, node)
                cidr = self._wait(node, "kubelet", partial(_pod_cidr, core, node.name), "pod range", timeout)
                nodes.write_cni_config(node, cidr)
                ranges[node.name] = (node.ordinal, cidr)
            network.set_routes(self.network, ranges)
            for node in self.nodes:
                argv = nodes.commands(node, self.binaries, _files_of(node))
                for component in ("kube-proxy", "kube-router"):
                    self._start(node, component, argv[component])
            for node in self.nodes:
                for component in ("kubelet", fakegpu.COMPONENT, "kube-proxy", "kube-router"):
                    self._wait(node, component, partial(_healthy, node, component), "healthy", timeout)
                self._wait(node, "kubelet", partial(_ready, core, node.name), "node Ready", timeout)
                self._wait_gpus(core, node, timeout)
            say(f"    {len(self.nodes)} real node(s) Ready after {time.monotonic() - started:.1f} s")
            volumes = self.host.state_dir / "volumes"
            volumes.mkdir(exist_ok=True)
            apply(api_client, addons.coredns(self.network, names["coredns"]))
            apply(
                api_client,
                addons.local_path_provisioner(volumes, names["local-path-provisioner"], names["busybox"]),
            )
            apps = k8s.AppsV1Api(api_client)
            for namespace, name in (
                ("kube-system", "coredns"),
                (addons.LOCAL_PATH_NAMESPACE, "local-path-provisioner"),
            ):
                wait_available(apps, core, namespace, name, timeout)
        say(
            "    real nodes, CoreDNS and local-path-provisioner ready "
            f"after {time.monotonic() - started:.1f} s"
        )

    def load_images(self, archives: list[Path]) -> None:
        """Import image archives into every real node's containerd, the nodes at once."""
        ctr = self.binaries.path("ctr")

        def load(node: RealNode) -> None:
            for archive in archives:
                import_image(ctr, node.containerd_socket, archive)

        with ThreadPoolExecutor(max_workers=len(self.nodes) or 1) as pool:
            list(pool.map(load, self.nodes))

    def _start(self, node: RealNode, component: str, argv: list[str]) -> None:
        log = node.log(self.host.logs_dir, component)
        record = processes.start(
            node.record_name(component),
            argv,
            log,
            env=nodes.environment(self.binaries),
            bind_to_parent=self.host.bind_to_parent,
        )
        self.records[node.record_name(component)] = record
        self.save()
        self.host.say(f"    started {node.name} {component} (pid {record.pid}, log {log})")

    def _running(self, node: RealNode, component: str) -> bool:
        record = self.records.get(node.record_name(component))
        return record is not None and processes.is_alive(record)

    def _alive_or_fail(self, node: RealNode, component: str) -> None:
        if not self._running(node, component):
            log = node.log(self.host.logs_dir, component)
            raise NodeStartError(
                f"{node.name}: {component} exited during start-up; last lines of {log}:\n{_tail(log)}"
            )

    def _wait(
        self, node: RealNode, component: str, check: Callable[[], Any], what: str, timeout: float
    ) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._alive_or_fail(node, component)
            try:
                result = check()
            except (ApiException, OSError):
                result = None
            if result:
                return result
            time.sleep(0.2)
        log = node.log(self.host.logs_dir, component)
        raise NodeStartError(
            f"{node.name}: no {what} after {timeout:.0f} s; last lines of {log}:\n{_tail(log)}"
        )

    def _wait_containerd(self, node: RealNode, timeout: float) -> None:
        def answers() -> bool:
            result = subprocess.run(
                [str(self.binaries.path("ctr")), "--address", str(node.containerd_socket), "version"],
                capture_output=True,
                check=False,
                timeout=10,
            )
            return result.returncode == 0

        self._wait(node, "containerd", answers, "answer from containerd", timeout)

    def _label(self, core: k8s.CoreV1Api, node: RealNode) -> None:
        labels = {**gpu_labels(self.pool, node.ordinal), nodes.NODE_KIND_LABEL: nodes.REAL}
        core.patch_node(node.name, {"metadata": {"labels": labels}})

    def _plugin_command(self, node: RealNode, model: GpuModel | None = None) -> list[str]:
        model = model or self.pool.model_of(node.ordinal)
        kubeconfig = _files_of(node).kubelet_kubeconfig
        return fakegpu.plugin_command(node, self.fake_gpu, model, self.pool.gpus_per_node, kubeconfig)

    def swap_gpus(self, name: str, model: GpuModel, timeout: float) -> None:
        """Give node `name` GPUs of `model` (its labels unchanged), as a GPU swapped in a chassis would.

        Its device plugin is restarted with the other model: pods started after this see it; the node's
        feature-discovery labels still name the model of before. `swap_gpus(name, pool's model)` undoes it.
        """
        node = self._node(name)
        record = self.records.get(node.record_name(fakegpu.COMPONENT))
        if record is not None:
            processes.kill(record)
        self._start(node, fakegpu.COMPONENT, self._plugin_command(node, model))
        self._wait(node, fakegpu.COMPONENT, partial(_healthy, node, fakegpu.COMPONENT), "healthy", timeout)
        with self.host.api_client() as api_client:
            self._wait_gpus(k8s.CoreV1Api(api_client), node, timeout)
        self.host.say(
            f"--> {name}'s GPUs are now {model.name} (compute capability {model.compute_capability})"
        )

    def _wait_gpus(self, core: k8s.CoreV1Api, node: RealNode, timeout: float) -> None:
        """Wait until the node's allocatable `nvidia.com/gpu` is the plugin's count.

        The kubelet reports a plugin's devices in its next node status update (about every 10 s); until
        then the scheduler sees none. After a restart the status may still hold the count of before: the
        plugin's health (a kubelet watches its devices) is what says the kubelet has them again.
        """
        wanted = str(self.pool.gpus_per_node)
        check = partial(_allocatable_gpus_are, core, node.name, wanted)
        self._wait(node, fakegpu.COMPONENT, check, f"{wanted} allocatable {GPU_RESOURCE}", timeout)
        resource = k8s.ResourceV1Api(core.api_client)
        published = partial(_slice_published, resource, node.name, self.pool.gpus_per_node)
        self._wait(node, fakegpu.COMPONENT, published, f"its {fakegpu.DRA_DRIVER} ResourceSlice", timeout)

    # -- a node lost and back ----------------------------------------------------------------------

    def _node(self, name: str) -> RealNode:
        found = [node for node in self.nodes if node.name == name]
        if not found:
            raise NodeStartError(f"no real node {name} (nodes: {', '.join(n.name for n in self.nodes)})")
        return found[0]

    def lose(self, name: str) -> list[str]:
        """Take node `name` away as a power cut does; `revive` starts it again.

        It is taken off the wire first, so that its peers hear nothing more from it (no connection is
        closed or reset), as from a machine that lost power: its address answers nothing and its stale
        rules forward nothing; the host's Service traffic goes through a node still alive. Then its
        components and every container on it are SIGKILLed.
        """
        node = self._node(name)
        network.cut_off(self.network, node.ordinal, [n.ordinal for n in self.nodes if n.name != name])
        records = {c: self.records.get(node.record_name(c)) for c in nodes.NODE_COMPONENTS}
        killed = [c for c, record in records.items() if record is not None and processes.kill(record)]
        nodes.kill_cgroup_processes(node)
        nodes.kill_shims(node)
        self.host.say(f"--> lost {name}: killed {', '.join(killed)} and its containers")
        return killed

    def revive(self, name: str, timeout: float) -> None:
        """Start a lost node's components again and wait until it is Ready."""
        node = self._node(name)
        network.reconnect(self.network, node.ordinal)
        argv = nodes.commands(node, self.binaries, _files_of(node))
        self._start(node, "containerd", argv["containerd"])
        self._wait_containerd(node, timeout)
        for component in ("kubelet", "kube-proxy", "kube-router"):
            self._start(node, component, argv[component])
        self._start(node, fakegpu.COMPONENT, self._plugin_command(node))
        with self.host.api_client() as api_client:
            core = k8s.CoreV1Api(api_client)
            for component in ("kubelet", fakegpu.COMPONENT, "kube-proxy", "kube-router"):
                self._wait(node, component, partial(_healthy, node, component), "healthy", timeout)
            self._wait(node, "kubelet", partial(_ready, core, node.name), "node Ready", timeout)
            self._label(core, node)
            self._wait_gpus(core, node, timeout)
        # Only once its kube-proxy has written the rules of today's endpoints: until then the node holds the
        # ones it had when it died (its health says healthy from the start, before its first sync).
        self._wait(node, "kube-proxy", partial(_rules_written, node), "Service rules written", timeout)
        alive = [n.ordinal for n in self.nodes if self._running(n, "kube-proxy")]
        network.route_services(self.network, alive)

    # -- status and stop --------------------------------------------------------------------------

    def components(self) -> Iterator[tuple[RealNode, str]]:
        """Every (node, component) in start order."""
        for node in self.nodes:
            for component in nodes.NODE_COMPONENTS:
                yield node, component

    def stop(self) -> list[str]:
        """Stop every node (see `nodes.stop_node`) and tear the network down; return what was running."""
        stopped = []
        for node in self.nodes:
            own = {
                c: r
                for c in nodes.NODE_COMPONENTS
                if (r := self.records.get(node.record_name(c))) is not None
            }
            for component in nodes.stop_node(node, own):
                stopped.append(node.record_name(component))
                self.host.say(f"--> stopped {node.name} {component} (pid {own[component].pid})")
            network.remove_node(self.network, node.name, node.ordinal)
            for component in own:
                self.records.pop(node.record_name(component), None)
        network.teardown(self.network)
        return stopped


def _files_of(node: RealNode) -> nodes.NodeFiles:
    return nodes.NodeFiles(
        containerd_config=node.directory / "containerd" / "config.toml",
        kubelet_config=node.directory / "kubelet" / "config.yaml",
        kubelet_kubeconfig=node.directory / "kubelet" / "kubeconfig",
        kube_proxy_config=node.directory / "kube-proxy" / "config.yaml",
        kube_router_kubeconfig=node.directory / "kube-router.kubeconfig",
    )


def _exists(core: k8s.CoreV1Api, name: str) -> bool:
    try:
        core.read_node(name)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def _pod_cidr(core: k8s.CoreV1Api, name: str) -> str | None:
    node: Any = core.read_node(name)
    return node.spec.pod_cidr  # type: ignore[no-any-return]


def _allocatable_gpus_are(core: k8s.CoreV1Api, name: str, wanted: str) -> bool:
    node: Any = core.read_node(name)
    return bool((node.status.allocatable or {}).get(GPU_RESOURCE, "0") == wanted)


def _slice_published(resource: k8s.ResourceV1Api, name: str, devices: int) -> bool:
    slices: Any = resource.list_resource_slice(field_selector=f"spec.nodeName={name}")
    return any(
        item.spec.driver == fakegpu.DRA_DRIVER and len(item.spec.devices or []) == devices
        for item in slices.items
    )


def _ready(core: k8s.CoreV1Api, name: str) -> bool:
    node: Any = core.read_node(name)
    conditions = node.status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions) and not any(
        t.key == "node.kubernetes.io/not-ready" for t in node.spec.taints or []
    )


def _healthy(node: RealNode, component: str) -> bool:
    url = nodes.health_url(node, component)
    if url is None:
        return True
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _rules_written(node: RealNode) -> bool:
    """Whether the node's kube-proxy has written its rules since it started.

    Its health answer lists each IP family's last write under `status`, and none before the first.
    """
    url = nodes.health_url(node, "kube-proxy")
    assert url is not None
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(json.load(response).get("status"))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_available(
    apps: k8s.AppsV1Api, core: k8s.CoreV1Api, namespace: str, name: str, timeout: float
) -> None:
    """Wait until Deployment `namespace/name` has an available replica; else fail with its pods' states."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        deployment: Any = apps.read_namespaced_deployment(name, namespace)
        if (deployment.status.available_replicas or 0) >= 1:
            return
        time.sleep(0.3)
    pods: list[Any] = core.list_namespaced_pod(namespace).items
    states = "; ".join(f"{p.metadata.name}: {p.status.phase} {_waiting_reasons(p)}" for p in pods)
    raise NodeStartError(f"{namespace}/{name} not available after {timeout:.0f} s ({states})")


def _waiting_reasons(pod: Any) -> str:
    statuses = (pod.status.init_container_statuses or []) + (pod.status.container_statuses or [])
    reasons = [s.state.waiting.reason for s in statuses if s.state and s.state.waiting]
    return f"({', '.join(reasons)})" if reasons else ""


def apply(api_client: k8s.ApiClient, objects: list[dict[str, Any]]) -> None:
    """Server-side apply `objects` (cluster-scoped or namespaced) as the local cluster's field manager."""
    client = dynamic.DynamicClient(api_client)  # type: ignore[no-untyped-call]
    for body in objects:
        resource = client.resources.get(api_version=body["apiVersion"], kind=body["kind"])
        namespace = body["metadata"].get("namespace")
        resource.server_side_apply(
            body=body,
            name=body["metadata"]["name"],
            namespace=namespace,
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
