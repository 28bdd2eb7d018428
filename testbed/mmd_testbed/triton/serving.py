"""Run a rendered plan's repository, with the doubles, on the local tritonserver with the plan's launch argv.

Shared by the triton test tier, `make bench-triton` and `make demo`: only the tritonserver path, the
repository directory and the ports differ from the argv a serving pod runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from mmctl.triton.client import TritonClient
from mmd_operator.knowledge import ModelKnowledge, RepositoryLayout
from mmd_operator.plan.launch import LaunchPlan, Ports, launch_plan
from mmd_operator.plan.settings import ENGINE_MOUNT
from mmd_operator.plan.triton import TritonPlan
from mmd_testbed.triton.doubles.repository import write_repository
from mmd_testbed.triton.engines import write_engine_configs
from mmd_testbed.triton.localserver import MPI_ENV, LocalServer, TritonInstall, free_port_set, running


@dataclass
class Served:
    """A running server on one rendered repository."""

    name: str
    plan: TritonPlan
    repository: Path
    ports: Ports
    log: Path
    launch: LaunchPlan
    process: LocalServer

    @property
    def knowledge(self) -> ModelKnowledge:
        """The served model type's knowledge."""
        return self.plan.settings.knowledge

    @property
    def configs(self) -> Mapping[str, str]:
        """The rendered configs, by model name."""
        return self.plan.repository.configs

    @property
    def decoupled(self) -> bool:
        """Whether the rendered tensorrt_llm is decoupled (then only streaming calls are answered)."""
        return "decoupled: true" in self.configs["tensorrt_llm"]

    @property
    def whisper(self) -> bool:
        """Whether the server transcribes audio (whisper_bls) rather than answering text."""
        return self.knowledge.layout is RepositoryLayout.WHISPER

    def url(self, protocol: str) -> str:
        """`http://...` or `grpc://...` of the server on 127.0.0.1."""
        return f"{protocol}://127.0.0.1:{self.ports.http if protocol == 'http' else self.ports.grpc}"

    def client(self, protocol: str = "grpc") -> TritonClient:
        """A client of the server over `protocol`."""
        return TritonClient(self.url(protocol), timeout=60)


def prepare(plan: TritonPlan, install: TritonInstall, directory: Path) -> tuple[Path, LaunchPlan, Ports]:
    """Write `plan`'s repository with doubles under `directory`; return it and its launch on free ports.

    The engines' `config.json` are written by the build-tool double from the plan's own build steps, into
    a local directory the doubles read in place of the engine cache entry the configs name.
    """
    repository = directory / "model_repository"
    entry = write_engine_configs(
        plan.build, directory / "engines" / plan.cache_key, plan.settings.tensor_parallel_size
    )
    write_repository(
        repository,
        plan.repository.configs,
        plan.settings.knowledge,
        install.stub_site,
        engine_dirs={f"{ENGINE_MOUNT}/{plan.cache_key}": str(entry)},
        release=plan.settings.release,
    )
    ports = free_port_set()
    launch = launch_plan(
        plan.settings, tritonserver=str(install.tritonserver), model_repository=str(repository), ports=ports
    )
    return repository, launch, ports


@contextlib.contextmanager
def serve(
    name: str,
    plan: TritonPlan,
    install: TritonInstall,
    workdir: Path,
    say: Callable[[str], None],
) -> Iterator[Served]:
    """Write `plan`'s repository with doubles (`prepare`) and run its launch argv until the block ends."""
    repository, launch, ports = prepare(plan, install, workdir / name)
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
