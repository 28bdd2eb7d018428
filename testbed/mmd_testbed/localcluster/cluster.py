"""`LocalCluster`: bring the local control plane up, report its status, tear it down.

All runtime state lives in one directory (default `.local/cluster/` in the checkout):
`state.json` (ports, pids), `pki/` (credentials), `kubeconfig`, `kwok.yaml`, `audit-policy.yaml`,
`etcd/` (data), `logs/<component>.log` and `logs/audit.log` (the API server's write requests). `up` is
idempotent: a healthy cluster is left running; a partly dead one is stopped and started afresh. `down`
stops every recorded process group and waits until they are gone. What each component runs with, and how
its health is asked, is `components`'.

Imports: the standard library, PyYAML, the kubernetes client and the modules of this package.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from mmd_testbed.localcluster import leaderworkerset, monitoring, network, nodes, processes, realnodes
from mmd_testbed.localcluster.audit import write_audit_policy
from mmd_testbed.localcluster.binaries import Binaries, ensure_binaries
from mmd_testbed.localcluster.components import COMPONENTS, PORT_NAMES, command, probe
from mmd_testbed.localcluster.fakegpu import ensure_fake_gpu
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.lwsbinaries import LwsBinaries, ensure_lws_binaries
from mmd_testbed.localcluster.metricsbinaries import MetricsBinaries, ensure_metrics_binaries
from mmd_testbed.localcluster.nodebinaries import NodeBinaries, ensure_node_binaries
from mmd_testbed.localcluster.objects import GPU_MODELS, NodePool, gpu_node, storage_class
from mmd_testbed.localcluster.pki import Credentials, generate_credentials, write_kubeconfig
from mmd_testbed.localcluster.stages import write_kwok_config
from mmd_testbed.localcluster.state import (
    REAL_NODE_PREFIX,
    ClusterFiles,
    ClusterState,
    ClusterStatus,
    ComponentStatus,
)
from mmd_testbed.ports import free_port

Printer = Callable[[str], None]

_LOG_TAIL_LINES = 30


class ClusterError(RuntimeError):
    """The cluster could not be brought up (the message names the component and its log)."""


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        content = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(content[-lines:])


class LocalCluster:
    """One local control plane, identified by its state directory."""

    def __init__(
        self,
        state_dir: Path,
        layout: Layout | None = None,
        *,
        say: Printer = print,
        bind_to_parent: bool = False,
    ) -> None:
        """Describe the cluster in `state_dir`; nothing starts until `up`.

        Args:
            state_dir: where its runtime files live.
            layout: the checkout and binary cache (found from the current directory when omitted).
            say: receives one line per step.
            bind_to_parent: have the kernel kill the components when this process dies (tests).
        """
        self.state_dir = state_dir.resolve()
        self.files = ClusterFiles(self.state_dir)
        self._layout = layout
        self.say = say
        self.bind_to_parent = bind_to_parent

    # -- paths ---------------------------------------------------------------------------------

    @property
    def layout(self) -> Layout:
        """Return the checkout and cache layout."""
        if self._layout is None:
            self._layout = Layout.discover()
        return self._layout

    @property
    def kubeconfig(self) -> Path:
        """Return the admin kubeconfig of this cluster."""
        return self.files.kubeconfig

    @property
    def logs_dir(self) -> Path:
        """Return the directory of the component logs."""
        return self.files.logs_dir

    @property
    def audit_log(self) -> Path:
        """Return the API server's audit log of write requests (JSON lines; see `audit`)."""
        return self.files.audit_log

    @property
    def credentials(self) -> Credentials:
        """Return the credential files of this cluster."""
        return self.files.credentials

    def log_path(self, component: str) -> Path:
        """Return the log file of `component`."""
        return self.files.log(component)

    def load_state(self) -> ClusterState | None:
        """Return the recorded state, or None when the cluster was never started here."""
        try:
            return ClusterState.from_json(json.loads(self.files.state_file.read_text()))
        except FileNotFoundError:
            return None

    def _save_state(self, state: ClusterState) -> None:
        scratch = self.files.state_file.with_suffix(".tmp")
        scratch.write_text(json.dumps(state.to_json(), indent=2) + "\n")
        scratch.replace(self.files.state_file)

    def server_url(self, state: ClusterState) -> str:
        """Return the API server's URL."""
        return f"https://{state.address}:{state.ports['kube-apiserver']}"

    def binaries(self) -> Binaries:
        """Return the binaries, building them first when the cache lacks them."""
        return ensure_binaries(self.layout, self.say)

    def api_client(self, token: str | None = None) -> k8s.ApiClient:
        """Return a kubernetes ApiClient for the admin user, or for `token` (the caller closes it)."""
        state = self.load_state()
        if state is None:
            raise ClusterError(f"no cluster recorded in {self.state_dir}")
        configuration = k8s.Configuration()
        configuration.host = self.server_url(state)
        configuration.ssl_ca_cert = str(self.credentials.ca_cert)
        configuration.api_key = {"authorization": token or self.credentials.token()}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        api_client: k8s.ApiClient = k8s.ApiClient(configuration)
        return api_client

    def token_kubeconfig(self, token: str, path: Path) -> Path:
        """Write to `path` a kubeconfig that reaches this cluster with `token` alone (a ServiceAccount's)."""
        admin = yaml.safe_load(self.kubeconfig.read_text())
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
                    "users": [{"name": "token", "user": {"token": token}}],
                    "contexts": [{"name": "token", "context": {"cluster": "local", "user": "token"}}],
                    "current-context": "token",
                }
            )
        )
        return path

    # -- up ------------------------------------------------------------------------------------

    def _lock(self) -> AbstractContextManager[None]:
        lock = self.state_dir / ".lock"
        return processes.exclusive_lock(
            lock, lambda: self.say(f"==> waiting for another mmd_testbed process holding {lock}")
        )

    def up(
        self,
        pool: NodePool | None = None,
        timeout: float = 180.0,
        *,
        real_nodes: NodePool | None = None,
        metrics: bool = False,
        lws: bool = False,
    ) -> ClusterState:
        """Start the cluster (or keep the healthy one running) and wait for Ready GPU nodes.

        `real_nodes` (a pool with a count) adds real nodes: kubelet, containerd, runc, CNI, kube-proxy,
        kube-router, and the DNS and volume add-ons. A cluster running with another count is restarted.
        `metrics` then adds the metrics path (`start_metrics`), `lws` the LWS controller (`start_lws`).
        """
        real = real_nodes or NodePool(count=0, name_prefix=REAL_NODE_PREFIX)
        if metrics and not real.count:
            raise ClusterError(
                "--metrics needs real nodes (--real-nodes N): Prometheus and prometheus-adapter run as pods "
                "and scrape serving pods that run"
            )
        if lws and not real.count:
            raise ClusterError("--lws needs real nodes (--real-nodes N): the LWS controller runs as a pod")
        if real.count:
            problems = realnodes.preflight(self.state_dir)
            if problems:
                raise ClusterError("cannot start real nodes: " + "; ".join(problems))
        binaries = self.binaries()
        node_binaries = ensure_node_binaries(self.layout, self.say) if real.count else None
        fake_gpu = ensure_fake_gpu(self.layout, self.say) if real.count else None
        metrics_binaries = ensure_metrics_binaries(self.layout, self.say) if metrics else None
        lws_binaries = ensure_lws_binaries(self.layout, self.say) if lws else None
        with self._lock():
            state = self._up(binaries, pool, timeout, real, node_binaries, fake_gpu)
            if metrics_binaries is not None:
                self._start_metrics(state, metrics_binaries, timeout)
            if lws_binaries is not None:
                self._start_lws(state, lws_binaries, timeout)
            return state

    def start_metrics(self, timeout: float = 180.0) -> None:
        """Run Prometheus and prometheus-adapter on the running cluster's real nodes (see `monitoring`).

        Idempotent: applied again, the objects stay as they are. Builds the binaries the first time.
        """
        metrics_binaries = ensure_metrics_binaries(self.layout, self.say)
        with self._lock():
            self._start_metrics(self._real_state(), metrics_binaries, timeout)

    def start_lws(self, timeout: float = 180.0) -> None:
        """Run the LWS controller on the real nodes (`leaderworkerset`): idempotent, builds it first."""
        lws_binaries = ensure_lws_binaries(self.layout, self.say)
        with self._lock():
            self._start_lws(self._real_state(), lws_binaries, timeout)

    def _start_lws(self, state: ClusterState, binaries: LwsBinaries, timeout: float) -> None:
        self.say(f"--> {binaries.versions.describe()}, in namespace {leaderworkerset.NAMESPACE}")
        archive = leaderworkerset.write_image(binaries, self.state_dir / "images")
        self._node_runner(state, None).load_images([archive])
        with self.api_client() as api_client:
            try:
                leaderworkerset.start(api_client, self.credentials, binaries, timeout, self.say)
            except (realnodes.NodeStartError, TimeoutError) as error:
                raise ClusterError(f"the LWS controller did not start: {error}") from error

    def _start_metrics(self, state: ClusterState, binaries: MetricsBinaries, timeout: float) -> None:
        started = time.monotonic()
        self.say(f"--> the metrics path: {binaries.versions.describe()}, in namespace {monitoring.NAMESPACE}")
        archives = monitoring.write_images(binaries, self.state_dir / "images")
        self._node_runner(state, None).load_images(archives)
        with self.api_client() as api_client:
            rules = monitoring.alert_rules(self.layout.repo_root)
            realnodes.apply(
                api_client, monitoring.objects(self.credentials, monitoring.image_names(binaries), rules)
            )
            apps, core = k8s.AppsV1Api(api_client), k8s.CoreV1Api(api_client)
            try:
                for name in (monitoring.PROMETHEUS, monitoring.ADAPTER):
                    realnodes.wait_available(apps, core, monitoring.NAMESPACE, name, timeout)
                monitoring.wait_apiservice(api_client, timeout, time.sleep)
            except (realnodes.NodeStartError, TimeoutError) as error:
                raise ClusterError(
                    f"the metrics path did not start: {error}; the cluster runs on without it "
                    f"(`kubectl -n {monitoring.NAMESPACE} logs deploy/{monitoring.ADAPTER}`, "
                    "then `python -m mmd_testbed cluster up --metrics` again)"
                ) from error
            service: Any = core.read_namespaced_service(monitoring.PROMETHEUS, monitoring.NAMESPACE)
        self.say(f"    Prometheus and prometheus-adapter ready after {time.monotonic() - started:.1f} s")
        self.say(
            f"    Prometheus API (from this host): http://{service.spec.cluster_ip}:{monitoring.PROMETHEUS_PORT}"
        )
        self.say(
            f"    custom metrics: kubectl get --raw /apis/{monitoring.CUSTOM_METRICS_GROUP}/"
            f"{monitoring.CUSTOM_METRICS_VERSION}"
        )

    def _up(
        self,
        binaries: Binaries,
        pool: NodePool | None,
        timeout: float,
        real: NodePool,
        node_binaries: NodeBinaries | None,
        fake_gpu: Path | None,
    ) -> ClusterState:
        started = time.monotonic()
        state = self.load_state()
        if state is not None:
            dead = [name for name in self._component_names(state) if not self._running(state, name)]
            if not dead and state.binaries != str(binaries.root):
                self.say(f"==> the running cluster uses other binaries ({state.binaries}); restarting it")
                self._down()
            elif not dead and (
                state.real_pool != real
                or state.node_binaries != _root(node_binaries)
                or state.fake_gpu != str(fake_gpu or "")
            ):
                self.say(
                    f"==> the running cluster has other real nodes ({state.real_pool.count}); restarting it"
                )
                self._down()
            elif not dead:
                self.say(f"==> cluster in {self.state_dir} is already running; checking it")
                self._wait_all_healthy(state, timeout)
                self._ensure_cluster_objects(state, pool or state.pool, timeout)
                self._say_ready(state, started)
                return state
            else:
                self.say(f"==> components not running: {', '.join(dead)}; restarting the whole cluster")
                self._down()

        state = ClusterState(
            ports={name: free_port() for name in PORT_NAMES},
            binaries=str(binaries.root),
            pool=pool or NodePool(),
            real_pool=real,
            node_binaries=_root(node_binaries),
            fake_gpu=str(fake_gpu or ""),
        )
        self._prepare_state_dir()
        self.say(f"==> starting a local control plane in {self.state_dir} ({binaries.versions.describe()})")
        if real.count:
            state.network_index = network.allocate(self.state_dir, _is_stale).index
            self.say(
                f"    node network {state.network and state.network.supernet}, API server at {state.address}"
            )
        extra = (
            () if state.network is None else (state.network.host_address, state.network.kubernetes_service_ip)
        )
        credentials = generate_credentials(self.credentials.directory, extra_addresses=extra)
        if state.network is not None:
            realnodes.NodeRunner.issue_apiserver_certificate(credentials)
        write_kubeconfig(self.kubeconfig, self.server_url(state), credentials)
        # The fake engine builder reports the GPU of the pool the cluster starts with, as nvidia-smi names it.
        gpu = GPU_MODELS[state.pool.gpu_model]
        write_kwok_config(
            self.files.kwok_config,
            binaries.kwok_stages_dir,
            gpu_name=gpu.name,
            compute_capability=f"{gpu.compute_major}.{gpu.compute_minor}",
        )
        write_audit_policy(self.files.audit_policy)
        self._save_state(state)
        try:
            for component in COMPONENTS:
                self._start(state, binaries, component)
                self._wait_healthy(state, component, timeout)
            self._ensure_cluster_objects(state, state.pool, timeout)
            if node_binaries is not None:
                self._node_runner(state, node_binaries).start(state.ports["kube-apiserver"], timeout)
        except BaseException:
            self.say("==> start-up failed; stopping what was started")
            self._down()
            raise
        self._say_ready(state, started)
        return state

    def _prepare_state_dir(self) -> None:
        # Logs survive a restart (each start is marked in the log); everything else is new. A crashed run's
        # mounts (kubelet volumes, container root file systems) are undone first: never delete through one.
        self.state_dir.mkdir(parents=True, exist_ok=True)
        nodes.unmount_all(self.state_dir)
        for entry in self.state_dir.iterdir():
            if entry.name in ("logs", ".lock"):
                continue
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self.logs_dir.mkdir(exist_ok=True)

    def _start(self, state: ClusterState, binaries: Binaries, component: str) -> None:
        record = processes.start(
            component,
            command(component, state=state, binaries=binaries, files=self.files),
            self.log_path(component),
            bind_to_parent=self.bind_to_parent,
        )
        state.processes[component] = record
        self._save_state(state)
        self.say(f"--> started {component} (pid {record.pid}, log {self.log_path(component)})")

    def _component_names(self, state: ClusterState) -> list[str]:
        """The control plane's components, then every real node's, in start order."""
        names = list(COMPONENTS)
        if state.network is not None:
            for index in range(state.real_pool.count):
                node = f"{state.real_pool.name_prefix}-{index}"
                names += [f"{node}/{component}" for component in nodes.NODE_COMPONENTS]
        return names

    def _node_runner(self, state: ClusterState, node_binaries: NodeBinaries | None) -> realnodes.NodeRunner:
        assert state.network is not None
        if node_binaries is None:
            node_binaries = NodeBinaries(Path(state.node_binaries), self.layout.node_versions)
        return realnodes.NodeRunner(
            self,
            state.network,
            state.real_pool,
            node_binaries,
            Path(state.fake_gpu),
            state.processes,
            lambda: self._save_state(state),
        )

    def lose_node(self, name: str) -> list[str]:
        """Take real node `name` away as a power cut does (`NodeRunner.lose`); `revive_node` undoes it."""
        with self._lock():
            state = self._real_state()
            return self._node_runner(state, None).lose(name)

    def revive_node(self, name: str, timeout: float = 120.0) -> None:
        """Start a lost real node again and wait until it is Ready."""
        with self._lock():
            state = self._real_state()
            self._node_runner(state, None).revive(name, timeout)

    def swap_gpus(self, name: str, model: str, timeout: float = 60.0) -> None:
        """Give real node `name` GPUs of `model` (a key of `GPU_MODELS`), its labels unchanged."""
        with self._lock():
            state = self._real_state()
            self._node_runner(state, None).swap_gpus(name, GPU_MODELS[model], timeout)

    def _real_state(self) -> ClusterState:
        state = self.load_state()
        if state is None or state.network is None:
            raise ClusterError(f"no cluster with real nodes is running in {self.state_dir}")
        return state

    def load_images(self, archives: list[Path]) -> None:
        """Import image archives (OCI layout tars) into every real node's container runtime."""
        self._node_runner(self._real_state(), None).load_images(archives)

    def _running(self, state: ClusterState, component: str) -> bool:
        record = state.processes.get(component)
        return record is not None and processes.is_alive(record)

    # -- health --------------------------------------------------------------------------------

    def _wait_healthy(self, state: ClusterState, component: str, timeout: float) -> None:
        started = time.monotonic()
        last = ""
        while time.monotonic() - started < timeout:
            if not self._running(state, component):
                raise ClusterError(
                    f"{component} exited during start-up; last lines of {self.log_path(component)}:\n"
                    f"{_tail(self.log_path(component))}"
                )
            healthy, last = probe(component, state=state, files=self.files)
            if healthy:
                self.say(f"    {component} healthy after {time.monotonic() - started:.1f} s")
                return
            time.sleep(0.2)
        raise ClusterError(
            f"{component} not healthy after {timeout:.0f} s (last answer: {last}); "
            f"last lines of {self.log_path(component)}:\n{_tail(self.log_path(component))}"
        )

    def _wait_all_healthy(self, state: ClusterState, timeout: float) -> None:
        for component in COMPONENTS:
            self._wait_healthy(state, component, timeout)

    # -- cluster objects -----------------------------------------------------------------------

    def _ensure_cluster_objects(self, state: ClusterState, pool: NodePool, timeout: float) -> None:
        with self.api_client() as api_client:
            core = k8s.CoreV1Api(api_client)
            storage = k8s.StorageV1Api(api_client)
            # With real nodes, local-path-provisioner's class is the default; kwok's stays for kwok's tests.
            _create_if_missing(storage.create_storage_class, storage_class(default=state.network is None))
            names = pool.node_names()
            for ordinal, name in enumerate(names):
                _create_if_missing(core.create_node, gpu_node(name, pool, ordinal))
            models = ", ".join(pool.gpu_models) if pool.gpu_models else pool.gpu_model
            self.say(f"--> {len(names)} fake GPU nodes, {pool.gpus_per_node} x {models} each")
            self._wait_nodes_ready(core, names, timeout)
        if pool != state.pool:
            state.pool = pool
            self._save_state(state)

    def _wait_nodes_ready(self, core: k8s.CoreV1Api, names: list[str], timeout: float) -> None:
        started = time.monotonic()
        pending: list[str] = names
        while time.monotonic() - started < timeout:
            pending = [name for name in names if not _node_schedulable(core.read_node(name))]
            if not pending:
                self.say(f"    nodes Ready and untainted after {time.monotonic() - started:.1f} s")
                return
            time.sleep(0.5)
        raise ClusterError(
            f"nodes not Ready after {timeout:.0f} s: {', '.join(pending)}; see {self.log_path('kwok')} "
            f"and {self.log_path('kube-controller-manager')}"
        )

    def _say_ready(self, state: ClusterState, started: float) -> None:
        self.say(f"==> cluster ready in {time.monotonic() - started:.1f} s: {self.server_url(state)}")
        self.say(f"    export KUBECONFIG={self.kubeconfig}")
        self.say(f"    export PATH={Path(state.binaries) / 'bin'}:$PATH   # kubectl, helm")
        if state.network is None:
            # Without real nodes no container runs: a chart's operator pod would only look Running.
            for line in (
                "kwok plays every node: pods are simulated and run nothing, the chart's operator pod",
                "included. Run the operator from the checkout (`python -m mmd_operator`), or start real",
                "nodes (`python -m mmd_testbed cluster up --real-nodes 2`) to run the chart's pod and the",
                "serving pods.",
            ):
                self.say(f"    {line}")

    # -- down and status -------------------------------------------------------------------------

    def restart(self, components: tuple[str, ...], *, downtime: float = 0.0, timeout: float = 120.0) -> None:
        """Stop `components` while the others run on (a fault), wait `downtime`, then start them again.

        Their data stays: etcd comes back with every object, the API server on the same port.
        """
        binaries = self.binaries()
        ordered = [name for name in COMPONENTS if name in components]
        with self._lock():
            state = self.load_state()
            if state is None:
                raise ClusterError(f"no cluster is recorded in {self.state_dir}")
            for component in reversed(ordered):
                processes.stop(state.processes[component])
                self.say(f"--> stopped {component} (pid {state.processes[component].pid})")
            time.sleep(downtime)
            for component in ordered:
                self._start(state, binaries, component)
                self._wait_healthy(state, component, timeout)

    def down(self) -> list[str]:
        """Stop every recorded component (reverse start order); return the names that were running."""
        if not self.state_dir.is_dir():
            return []
        with self._lock():
            return self._down()

    def _down(self) -> list[str]:
        state = self.load_state()
        if state is None:
            return []
        stopped = []
        if state.network is not None:
            runner = self._node_runner(state, None)
            stopped += runner.stop()
            self._save_state(state)
        for component in reversed(list(state.processes)):
            # Bound to the node bridge, the API server's graceful shutdown waits out its 15 s-plus HTTP
            # shutdown timeout (on loopback it ends in about a second); its data is thrown away anyway.
            grace = 3.0 if component == "kube-apiserver" and state.network is not None else 15.0
            if processes.stop(state.processes[component], timeout=grace):
                stopped.append(component)
                self.say(f"--> stopped {component} (pid {state.processes[component].pid})")
        self.files.state_file.unlink(missing_ok=True)
        return stopped

    def status(self) -> ClusterStatus:
        """Return the state of every component (and of the nodes when the API answers)."""
        state = self.load_state()
        if state is None:
            return ClusterStatus(components=[], nodes_ready=None, nodes_total=None, server=None)
        components = []
        for name in self._component_names(state):
            record = state.processes.get(name)
            if record is None:
                components.append(ComponentStatus(name, None, False, False, "never started"))
                continue
            if not processes.is_alive(record):
                components.append(
                    ComponentStatus(name, record.pid, False, False, f"DEAD - see {self.log_path(name)}")
                )
                continue
            healthy, answer = probe(name, state=state, files=self.files)
            components.append(ComponentStatus(name, record.pid, True, healthy, answer[:60]))
        nodes_ready = nodes_total = None
        if any(c.name == "kube-apiserver" and c.healthy for c in components):
            with self.api_client() as api_client:
                nodes = k8s.CoreV1Api(api_client).list_node().items
            nodes_total = len(nodes)
            nodes_ready = sum(1 for node in nodes if _node_schedulable(node))
        return ClusterStatus(components, nodes_ready, nodes_total, self.server_url(state))


def _root(node_binaries: NodeBinaries | None) -> str:
    return "" if node_binaries is None else str(node_binaries.root)


def _is_stale(state_dir: Path) -> bool:
    """Whether the cluster in `state_dir` has no live process (its network may be reclaimed)."""
    try:
        state = ClusterState.from_json(json.loads((state_dir / "state.json").read_text()))
    except (OSError, ValueError, KeyError):
        return True
    return not any(processes.is_alive(record) for record in state.processes.values())


def _create_if_missing(create: Callable[..., object], body: dict[str, Any]) -> None:
    try:
        create(body=body)
    except ApiException as error:
        if error.status != 409:  # already exists: `up` is idempotent
            raise


def _node_schedulable(node: Any) -> bool:
    """Return whether the node is Ready and free of the not-ready/unreachable taints."""
    conditions = node.status.conditions or []
    ready = any(condition.type == "Ready" and condition.status == "True" for condition in conditions)
    taints = node.spec.taints or []
    blocking = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    return ready and not any(taint.key in blocking for taint in taints)
