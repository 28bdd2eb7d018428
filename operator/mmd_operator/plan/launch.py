"""The exact command a serving pod runs: `tritonserver` for one rank, `mpirun` with one segment per rank.

A world across pods is started by its group's leader (`desired.groups`) from the same segments.

In the TensorRT-LLM backend's leader mode every tensor-parallel rank is its own tritonserver process.
Rank 0 serves the whole repository; the other ranks load only the GPU models explicitly and never open
their ports. Each rank gets its own Python-backend shared-memory prefix (ranks collide otherwise), and
rank 0 gets the CUDA memory pool on GPU 0 that carries prompt tables between models. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mmd_operator.plan.settings import MODEL_REPOSITORY, Settings

TRITONSERVER = "/opt/tritonserver/bin/tritonserver"
HTTP_PORT = 8000
GRPC_PORT = 8001
METRICS_PORT = 8002
# Open MPI inside containers: the PMIx shared-memory data store fails without this.
LAUNCH_ENV = {"PMIX_MCA_gds": "hash"}


@dataclass(frozen=True)
class Ports:
    """Ports rank 0 listens on."""

    http: int = HTTP_PORT
    grpc: int = GRPC_PORT
    metrics: int = METRICS_PORT


# A rank other than 0 of a world across pods: no endpoint at all (in one pod it never opens its ports, as
# its models never finish loading; across pods that is left to no chance).
NO_ENDPOINTS = ("--allow-http=false", "--allow-grpc=false", "--allow-metrics=false")


@dataclass(frozen=True)
class Segment:
    """`count` ranks that run `argv`: one MPMD segment of the `mpirun` of a world across pods."""

    count: int
    argv: tuple[str, ...]


@dataclass(frozen=True)
class LaunchPlan:
    """The argv of every rank and the full command that starts them all."""

    ranks: tuple[tuple[str, ...], ...]
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=lambda: dict(LAUNCH_ENV))

    @property
    def group_segments(self) -> tuple[Segment, ...]:
        """The world as the leader of a group across pods runs it: one segment per rank."""
        return tuple(
            Segment(1, argv if rank == 0 else (*argv, *NO_ENDPOINTS)) for rank, argv in enumerate(self.ranks)
        )


def rank_argv(
    settings: Settings,
    *,
    rank: int,
    tritonserver: str = TRITONSERVER,
    model_repository: str = MODEL_REPOSITORY,
    ports: Ports = Ports(),
) -> tuple[str, ...]:
    """The tritonserver argv of one rank."""
    argv = [
        tritonserver,
        f"--model-repository={model_repository}",
        f"--grpc-port={ports.grpc}",
        f"--http-port={ports.http}",
        f"--metrics-port={ports.metrics}",
    ]
    if rank != 0:
        argv.append("--model-control-mode=explicit")
        argv += [f"--load-model={name}" for name in ("tensorrt_llm", *settings.knowledge.rank_models)]
    else:
        argv.append(f"--cuda-memory-pool-byte-size=0:{settings.limits.cuda_memory_pool_bytes}")
    argv += [
        "--disable-auto-complete-config",
        f"--backend-config=python,shm-region-prefix-name=prefix{rank}_",
    ]
    return tuple(argv)


def launch_plan(
    settings: Settings,
    *,
    tritonserver: str = TRITONSERVER,
    model_repository: str = MODEL_REPOSITORY,
    ports: Ports = Ports(),
    mpirun: str = "mpirun",
) -> LaunchPlan:
    """The command for the whole tensor-parallel world of `settings`."""
    world_size = settings.tensor_parallel_size
    ranks = tuple(
        rank_argv(
            settings, rank=rank, tritonserver=tritonserver, model_repository=model_repository, ports=ports
        )
        for rank in range(world_size)
    )
    if world_size == 1:
        return LaunchPlan(ranks=ranks, argv=ranks[0])
    argv: list[str] = [mpirun, "--allow-run-as-root"]
    for segment in ranks:
        argv += ["-n", "1", *segment, ":"]
    return LaunchPlan(ranks=ranks, argv=tuple(argv))
