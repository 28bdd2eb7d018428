"""The cluster tier: one real local control plane per test session, one fresh namespace per test.

The binaries are built (or found in the cache) right after collection, outside any test, so the
per-test timeout does not count a cold build. The cluster is started by the first test that asks
for it and stopped at the end of the session, even when tests fail; its components are also bound
to this process, so the kernel kills them if pytest itself dies.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from mmd_operator.cli.localcluster.binaries import Binaries, ensure_binaries
from mmd_operator.cli.localcluster.cluster import LocalCluster
from mmd_operator.cli.localcluster.layout import Layout
from tests.support.progress import terminal_printer

_CLUSTER_DIR = Path(__file__).parent


def _wants_cluster(session: pytest.Session) -> bool:
    return any(_CLUSTER_DIR in Path(str(item.path)).parents for item in session.items)


def pytest_collection_finish(session: pytest.Session) -> None:
    if _wants_cluster(session):
        ensure_binaries(Layout.discover(), say=terminal_printer(session.config))


@pytest.fixture(scope="session")
def say(pytestconfig: pytest.Config) -> Callable[[str], None]:
    return terminal_printer(pytestconfig)


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    return ensure_binaries(Layout.discover(), say=print)


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


@dataclass
class Kube:
    """Typed-enough handles on the API groups the tests use, plus helpers."""

    core: Any
    apps: Any
    batch: Any
    storage: Any

    def wait_for(
        self, what: str, check: Callable[[], Any], timeout: float = 60.0, interval: float = 0.3
    ) -> Any:
        """Poll `check` until it returns something truthy; fail with `what` after `timeout`."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                result = check()
            except ApiException as error:
                last_error = error
                result = None
            if result:
                return result
            time.sleep(interval)
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last API error: {last_error})")


@pytest.fixture(scope="session")
def kube(api_client: k8s.ApiClient) -> Kube:
    return Kube(
        core=k8s.CoreV1Api(api_client),
        apps=k8s.AppsV1Api(api_client),
        batch=k8s.BatchV1Api(api_client),
        storage=k8s.StorageV1Api(api_client),
    )


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kube: Kube) -> Iterator[str]:
    """A fresh namespace with its default ServiceAccount (pods are rejected before it exists)."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace({"metadata": {"name": name, "labels": {"mmd.test/session": "cluster"}}})
    kube.wait_for(
        f"serviceaccount default in {name}",
        lambda: kube.core.read_namespaced_service_account("default", name),
        timeout=60,
    )
    yield name
    kube.core.delete_namespace(name, propagation_policy="Background")


@dataclass(frozen=True)
class Tools:
    """kubectl and helm from the binary cache, pointed at the session cluster."""

    bin_dir: Path
    env: dict[str, str]

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.bin_dir / args[0]), *args[1:]],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            pytest.fail(f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result


@pytest.fixture(scope="session")
def tools(local_cluster: LocalCluster, binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Tools:
    home = tmp_path_factory.mktemp("tools-home")
    env = {
        "PATH": f"{binaries.bin_dir}:{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(local_cluster.kubeconfig),
        "HOME": str(home),
        # helm keeps its cache, config and data under these; keep them out of the real home.
        "HELM_CACHE_HOME": str(home / "helm-cache"),
        "HELM_CONFIG_HOME": str(home / "helm-config"),
        "HELM_DATA_HOME": str(home / "helm-data"),
    }
    return Tools(bin_dir=binaries.bin_dir, env=env)
