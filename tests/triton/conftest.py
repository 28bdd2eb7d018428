"""The triton tier: real tritonserver processes (nvidia-pytriton wheel) on the rendered repositories.

Every test here is marked `triton`. A repository is rendered from an example exactly as `mmctl render`
does, written with Python-backend doubles in place of the GPU/serving-image models (`doubles.py`), and
started with the launch argv `plan.launch` computes (only the tritonserver path, repository and ports
differ). Servers are started once per example and module and stopped when the module is done; they are
bound to this process, so none outlives the session.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import http.server
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmd_operator.knowledge import ModelKnowledge, RepositoryLayout
from mmd_operator.plan.deployment import DeploymentPlan, plan_resource
from mmd_operator.plan.launch import Ports, launch_plan
from mmd_operator.triton.client import TritonClient
from mmd_operator.triton.localserver import (
    MPI_ENV,
    TritonInstall,
    TritonNotInstalledError,
    free_port_set,
    running,
)
from tests.support.progress import terminal_printer
from tests.triton.doubles import write_repository

HERE = Path(__file__).parent
EXAMPLES = HERE.parent.parent / "examples"
EXAMPLE_NAMES = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.triton)


@pytest.fixture(scope="session")
def say(pytestconfig: pytest.Config) -> Callable[[str], None]:
    return terminal_printer(pytestconfig)


@pytest.fixture(scope="session")
def triton_install() -> TritonInstall:
    try:
        return TritonInstall.discover()
    except TritonNotInstalledError as error:
        pytest.fail(str(error), pytrace=False)


def load_example(name: str, overrides: Mapping[str, Any] | None = None) -> DeploymentPlan:
    """The plan of examples/<name>.yaml, with `overrides` merged into `spec.serving`."""
    document = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    if overrides:
        document = copy.deepcopy(document)
        document["spec"].setdefault("serving", {}).update(overrides)
    _, plan = plan_resource(document)
    return plan


@dataclass
class Served:
    """A running server on one rendered repository."""

    name: str
    plan: DeploymentPlan
    repository: Path
    ports: Ports
    log: Path

    @property
    def knowledge(self) -> ModelKnowledge:
        return self.plan.settings.knowledge

    @property
    def configs(self) -> Mapping[str, str]:
        return self.plan.repository.configs

    @property
    def decoupled(self) -> bool:
        """Whether the rendered tensorrt_llm is decoupled (then only streaming calls are answered)."""
        return "decoupled: true" in self.configs["tensorrt_llm"]

    @property
    def whisper(self) -> bool:
        return self.knowledge.layout is RepositoryLayout.WHISPER

    def url(self, protocol: str) -> str:
        return f"{protocol}://127.0.0.1:{self.ports.http if protocol == 'http' else self.ports.grpc}"

    def client(self, protocol: str = "grpc") -> TritonClient:
        return TritonClient(self.url(protocol), timeout=60)


@contextlib.contextmanager
def serve(
    name: str,
    plan: DeploymentPlan,
    install: TritonInstall,
    workdir: Path,
    say: Callable[[str], None],
) -> Iterator[Served]:
    """Write `plan`'s repository with doubles and run its launch argv until the block ends."""
    repository = workdir / name / "model_repository"
    write_repository(repository, plan.repository.configs, plan.settings.knowledge, install.stub_site)
    ports = free_port_set()
    launch = launch_plan(
        plan.settings, tritonserver=str(install.tritonserver), model_repository=str(repository), ports=ports
    )
    env = dict(launch.env)
    if len(launch.ranks) > 1:
        env |= MPI_ENV
    log = workdir / name / "server.log"
    with running(
        launch.argv,
        http_port=ports.http,
        log_path=log,
        env=env,
        timeout=120,
        on_ready=lambda s: say(f"\n  [triton] {name}: ready in {s:.1f} s on 127.0.0.1:{ports.http}"),
    ):
        yield Served(name, plan, repository, ports, log)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="session")
def image_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A loopback HTTP server for image URLs: (base URL, directory it serves)."""
    root = tmp_path_factory.mktemp("images")
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
