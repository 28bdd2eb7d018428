"""The cluster tier: one real local control plane per test session, one fresh namespace per test.

The binaries are built (or found in the cache) right after collection, outside any test, so the
per-test timeout does not count a cold build. The cluster is started by the first test that asks
for it and stopped at the end of the session, even when tests fail; its components are also bound
to this process, so the kernel kills them if pytest itself dies.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from mmd_operator.config import OperatorConfig
from mmd_operator.election import Timings
from mmd_operator.kube.client import user_agent
from mmd_testbed.localcluster.binaries import Binaries, ensure_binaries
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.gitops_check import ensure_gitops_check
from mmd_testbed.localcluster.layout import Layout
from tests.support.kube import POD_SECURITY, Kube, Resources, Tools, install_crd
from tests.support.progress import terminal_printer

_CLUSTER_DIR = Path(__file__).parent


def _wants_cluster(session: pytest.Session) -> bool:
    return any(_CLUSTER_DIR in Path(str(item.path)).parents for item in session.items)


def pytest_collection_finish(session: pytest.Session) -> None:
    if _wants_cluster(session):
        ensure_binaries(Layout.discover(), say=terminal_printer(session.config))
        ensure_gitops_check(Layout.discover(), say=terminal_printer(session.config))


@pytest.fixture(scope="session")
def say(pytestconfig: pytest.Config) -> Callable[[str], None]:
    return terminal_printer(pytestconfig)


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    return ensure_binaries(Layout.discover(), say=print)


@pytest.fixture(scope="session")
def gitops_check() -> Path:
    """The kstatus and Argo CD health checker (testbed/go/gitops)."""
    return ensure_gitops_check(Layout.discover())


@pytest.fixture(scope="session")
def local_cluster(
    tmp_path_factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("local-cluster"), say=say, bind_to_parent=True)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="session")
def api_client(local_cluster: LocalCluster) -> Iterator[k8s.ApiClient]:
    with local_cluster.api_client() as client:
        yield client


@pytest.fixture(scope="session")
def kube(api_client: k8s.ApiClient) -> Kube:
    return Kube.of(api_client)


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kube: Kube) -> Iterator[str]:
    """A fresh namespace with its default ServiceAccount (pods are rejected before it exists).

    The API server's Pod Security admission enforces `restricted` in it, so every pod the operator's
    Jobs and Deployments make is judged by the API server itself; tests that make pods of their own
    pass them through `restricted()`.
    """
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace(
        {"metadata": {"name": name, "labels": {"mmd.test/session": "cluster", **POD_SECURITY}}}
    )
    kube.wait_for(
        f"serviceaccount default in {name}",
        lambda: kube.core.read_namespaced_service_account("default", name),
        timeout=60,
    )
    yield name
    kube.core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture(scope="session")
def tools(local_cluster: LocalCluster, binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Tools:
    home = tmp_path_factory.mktemp("tools-home")
    return Tools.for_cluster(binaries.bin_dir, local_cluster.kubeconfig, home)


# -- the operator ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def crd(api_client: k8s.ApiClient) -> None:
    """The generated CRD, installed (or replaced) and Established."""
    install_crd(api_client)


STARTED = "Operator started"
STANDING_BY = "Standing by as"


class OperatorProcess:
    """`python -m mmd_operator` (what the operator image runs) as a child process of the test session."""

    def __init__(
        self,
        kubeconfig: Path,
        log: Path,
        *,
        namespaces: tuple[str, ...] = (),
        command: tuple[str, ...] = (sys.executable, "-m", "mmd_operator"),
        **settings: str,
    ) -> None:
        self.command = command
        self.kubeconfig = kubeconfig
        self.log = log
        self.namespaces = namespaces
        self.settings = settings
        self.process: subprocess.Popen[bytes] | None = None
        self.metrics_port = self.health_port = 0

    def start(self, timeout: float = 60, ready: tuple[str, ...] = (STARTED,)) -> str:
        """Start the process and wait until its log says one of `ready`; which one it said.

        A port found free can be taken by another test worker before the operator binds it: then the
        operator exits at once saying so, and starts again on other ports (three tries).
        """
        for attempt in range(3):
            said = self._start(timeout, ready)
            if said is not None:
                return said
            assert self.process is not None
            if attempt == 2 or "Address already in use" not in self.output():
                break
        pytest.fail(f"the operator exited with {self.process.returncode}:\n{self.output()[-3000:]}")
        raise AssertionError  # pytest.fail does not return

    def _start(self, timeout: float, ready: tuple[str, ...]) -> str | None:
        """Start the process once; which of `ready` its log said, or None when it exited first."""
        from mmd_testbed.ports import free_port

        self.metrics_port, self.health_port = free_port(), free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "MMD_METRICS_PORT": str(self.metrics_port),
            "MMD_HEALTH_PORT": str(self.health_port),
            # Tests fix and create things within seconds; look again that soon.
            "MMD_RETRY_SECONDS": "2",
            "MMD_WORKERS": "4",
            **self.settings,
        }
        args = list(self.command)
        for namespace in self.namespaces:
            args += ["--namespace", namespace]
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return None
            said = self.log.read_text(errors="replace")[offset:]
            for line in ready:
                if line in said:
                    return line
            time.sleep(0.1)
        pytest.fail(f"the operator did not start in {timeout:.0f} s:\n{self.output()[-3000:]}")
        raise AssertionError  # pytest.fail does not return

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind, as when a node dies."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        self.process = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


# The session's operator, once a test on this worker asked for it (groups run one after another here).
_SESSION_OPERATORS: list[OperatorProcess] = []


@pytest.fixture(scope="session")
def operator(
    local_cluster: LocalCluster, crd: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """One operator for the session, watching every namespace; tests that stop it start it again."""
    process = OperatorProcess(local_cluster.kubeconfig, tmp_path_factory.mktemp("operator") / "operator.log")
    _SESSION_OPERATORS.append(process)
    process.start()
    yield process
    process.stop()
    _SESSION_OPERATORS.remove(process)


@pytest.fixture(scope="module")
def no_operator() -> Iterator[None]:
    """No operator of ours at work while the module runs: the session's, if one runs here, is stopped.

    It watches every namespace, so it would reconcile a resource such a module writes and reads back
    (its status among others), and an earlier module on the same worker may have started it.
    """
    stopped = [process for process in _SESSION_OPERATORS if process.running]
    for process in stopped:
        process.stop()
    yield
    for process in stopped:
        process.start()


@dataclass
class Electorate:
    """Operator processes electing a leader on one Lease in the test's namespace, as the chart's replicas
    do (the chart's timings), on a ServiceAccount's token: the audit log keeps its reads too, and each
    process's requests carry its identity (`<name>-<suffix>`) in their user agent."""

    kube: Kube
    kubeconfig: Path
    directory: Path
    namespace: str
    lease: str = "mmd-operator"
    timings: Timings = field(
        default_factory=lambda: Timings(
            OperatorConfig().lease_duration_seconds,
            OperatorConfig().lease_renew_deadline_seconds,
            OperatorConfig().lease_retry_seconds,
        )
    )
    processes: dict[str, OperatorProcess] = field(default_factory=dict)

    def start(self, name: str) -> str:
        """Start (or start again) the process `name`; whether it came up as the leader or a standby."""
        process = self.processes.get(name) or OperatorProcess(
            self.kubeconfig,
            self.directory / f"{name}.log",
            MMD_LEADER_ELECTION="true",
            MMD_LEASE_NAME=self.lease,
            MMD_LEASE_NAMESPACE=self.namespace,
            MMD_POD_NAME=name,
        )
        self.processes[name] = process
        return "leader" if process.start(ready=(STARTED, STANDING_BY)) == STARTED else "standby"

    def holder(self) -> str:
        """The process holding the Lease ("" when nobody does)."""
        lease = k8s.CoordinationV1Api(self.kube.core.api_client).read_namespaced_lease(
            self.lease, self.namespace
        )
        return str(lease.spec.holder_identity or "").rpartition("-")[0]

    def wait_for_holder(self, name: str, timeout: float) -> None:
        """Poll the Lease (every 50 ms) until `name` holds it."""
        self.kube.wait_for(f"{name} to hold the Lease", lambda: self.holder() == name, timeout, interval=0.05)

    def agents(self, name: str) -> tuple[str, ...]:
        """The user-agent prefix of the process `name`'s own requests."""
        return (f"{user_agent()} ({name}-",)

    def stop(self) -> None:
        for process in self.processes.values():
            process.stop()


@pytest.fixture
def electorate(
    kube: Kube, local_cluster: LocalCluster, operator: OperatorProcess, namespace: str, tmp_path: Path
) -> Iterator[Electorate]:
    """Electing operators (none started yet) in place of the session's operator, on a token of their own."""
    account = "operators"
    rbac = k8s.RbacAuthorizationV1Api(kube.core.api_client)
    binding = f"{namespace}-operators"
    kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        }
    )
    token = kube.core.create_namespaced_service_account_token(
        account, namespace, {"spec": {"expirationSeconds": 7200}}
    ).status.token
    kubeconfig = local_cluster.token_kubeconfig(token, tmp_path / "operators.kubeconfig")
    operator.stop()  # nobody but the elected leader may do the work
    electorate = Electorate(kube, kubeconfig, tmp_path, namespace)
    try:
        yield electorate
    finally:
        electorate.stop()
        rbac.delete_cluster_role_binding(binding)
        operator.start()


def operator_writes_at_rest(audit_log: Path, namespace: str, seconds: float) -> list[dict[str, Any]]:
    """The operator's writes in `namespace` during `seconds`, once its last writes' echoes settled."""
    from datetime import UTC, datetime

    from mmd_testbed.localcluster.audit import write_requests

    time.sleep(3)
    since = datetime.now(UTC)
    time.sleep(seconds)
    return [
        event
        for event in write_requests(audit_log, user_agent_prefixes=("mmd-operator/", "kopf/"), since=since)
        # Earlier tests' namespaces may still be going away, and their resources with them.
        if event["objectRef"].get("namespace") == namespace
    ]


@pytest.fixture
def resources(api_client: k8s.ApiClient, kube: Kube, namespace: str) -> Resources:
    return Resources(kube=kube, custom=k8s.CustomObjectsApi(api_client), namespace=namespace)
