"""Run a rendered repository, with the doubles, on the real tritonserver: shared by the triton tier and
the benchmark. Only the tritonserver path, the repository and the ports differ from the operator's argv.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mmd_operator.knowledge import ModelKnowledge, RepositoryLayout
from mmd_operator.plan.deployment import DeploymentPlan, plan_resource
from mmd_operator.plan.launch import LaunchPlan, Ports, launch_plan
from mmd_operator.triton.client import TritonClient
from mmd_operator.triton.localserver import MPI_ENV, LocalServer, TritonInstall, free_port_set, running
from tests.triton.doubles import write_repository

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


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
    launch: LaunchPlan
    process: LocalServer

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
    ranks = f"{len(launch.ranks)} ranks under mpirun, " if len(launch.ranks) > 1 else ""
    with running(
        launch.argv,
        http_port=ports.http,
        log_path=log,
        env=env,
        timeout=120,
        on_ready=lambda s: say(f"\n  [triton] {name}: {ranks}ready in {s:.1f} s on 127.0.0.1:{ports.http}"),
    ) as process:
        yield Served(name, plan, repository, ports, log, launch, process)
