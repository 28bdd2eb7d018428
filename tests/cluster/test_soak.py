"""The soak: resources applied, changed and deleted at random with faults mixed in, for a set time.

Every few minutes (`checkpoint`) the actions pause and the namespace must pass the whole consistency
check (`tests/support/consistency.py`); the operator's resident memory is sampled there. The operator is
killed only in the first half, so the second half's samples come from one process and show whether its
memory grows. `make test` runs 60 s; `make soak` runs 30 minutes (MMD_SOAK_SECONDS=1800).
"""

from __future__ import annotations

import copy
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.objects import NodePool, gpu_node
from mmd_testbed.localcluster.stages import FAULT_LABEL
from tests.support.kube import Kube, Resources

from .conftest import OperatorProcess
from .test_fault_loops import _serving_pod, _set_ready, converge

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SECONDS = float(os.environ.get("MMD_SOAK_SECONDS", "60"))
CHECKPOINT_SECONDS = float(os.environ.get("MMD_SOAK_CHECKPOINT_SECONDS", str(max(SECONDS / 6, 20))))
MIN_CHECKPOINTS = 3
POPULATION = int(os.environ.get("MMD_SOAK_POPULATION", "30"))
SEED = int(os.environ.get("MMD_SOAK_SEED", str(time.time_ns() % 100_000)))
NODES = NodePool(count=6, name_prefix="soak-node")
# Growth allowed between the first and the last memory sample of the second half.
RSS_SLACK = 1.10
RSS_SLACK_MIB = 8.0


def say(text: str) -> None:
    print(f"\n[soak] {text}", flush=True)


@pytest.fixture
def room(kube: Kube) -> Iterator[None]:
    """Forty-eight more GPUs: the population at two replicas, and builds."""
    for name in NODES.node_names():
        kube.core.create_node(gpu_node(name, NODES))
    yield
    for name in NODES.node_names():
        kube.core.delete_node(name)


def _rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")) / 1024


class Soak:
    """The population, the random actions and the faults, with a count of each."""

    def __init__(
        self,
        resources: Resources,
        kube: Kube,
        namespace: str,
        operator: OperatorProcess,
        cluster: LocalCluster,
        rng: random.Random,
    ) -> None:
        self.resources, self.kube, self.namespace = resources, kube, namespace
        self.operator, self.cluster, self.rng = operator, cluster, rng
        self.templates = [yaml.safe_load((EXAMPLES / f"{n}.yaml").read_text()) for n in ("llava", "whisper")]
        self.live: dict[str, dict[str, Any]] = {}
        self.broken: set[str] = set()  # resources whose builds are made to fail, fixed before a check
        self.unready: list[Any] = []  # serving pods made unready, made ready again before a check
        self.counts: Counter[str] = Counter()
        self.serial = 0
        self.may_kill = True

    def _apply(self, document: dict[str, Any]) -> None:
        self.resources.apply(document)
        self.live[document["metadata"]["name"]] = document

    def create(self) -> None:
        document = copy.deepcopy(self.rng.choice(self.templates))
        document["metadata"] = {"name": f"s{self.serial:04d}"}
        document["spec"].setdefault("engine", {})["maxBatchSize"] = self.rng.randrange(8, 14)
        self.serial += 1
        self._apply(document)

    def change(self) -> None:
        document = copy.deepcopy(self.live[self.rng.choice(sorted(self.live))])
        spec = document["spec"]
        what = self.rng.choice(("engine", "serving", "replicas"))
        if what == "engine":
            spec["engine"]["maxBatchSize"] = self.rng.randrange(8, 14)
        elif what == "serving":
            spec.setdefault("serving", {}).setdefault("queue", {})["maxQueueDelayMicroseconds"] = (
                self.rng.randrange(1, 10_000)
            )
        else:
            spec.setdefault("serving", {})["replicas"] = self.rng.randrange(0, 3)
        self.counts[f"change {what}"] += 1
        self._apply(document)

    def delete(self) -> None:
        name = self.rng.choice(sorted(self.live))
        self.resources.delete(name)
        del self.live[name]
        self.broken.discard(name)

    def break_build(self) -> None:
        """A new engine whose build pods fail (the resource reports Failed until it is fixed)."""
        name = self.rng.choice(sorted(self.live))
        document = copy.deepcopy(self.live[name])
        document["spec"]["engine"]["maxBatchSize"] = self.rng.randrange(14, 18)
        document["spec"]["build"] = {"backoffLimit": 0, "pod": {"labels": {FAULT_LABEL: "fail"}}}
        self.broken.add(name)
        self._apply(document)

    def unready_pod(self) -> None:
        name = self.rng.choice(sorted(self.live))
        pod = _serving_pod(self.kube, self.namespace, name)
        if pod is not None and pod.status.container_statuses:
            _set_ready(self.kube, self.namespace, pod, ready=False, restarts=1)
            self.unready.append(pod)

    def kill_operator(self) -> None:
        self.operator.kill()
        time.sleep(self.rng.uniform(0, 2))
        self.operator.start()

    def restart_api_server(self) -> None:
        self.cluster.restart(("etcd", "kube-apiserver"), downtime=1.0)

    def step(self) -> None:
        actions: list[tuple[str, Callable[[], None], float]] = [
            ("create", self.create, 3.0 if len(self.live) < POPULATION else 0.0),
            ("change", self.change, 4.0 if self.live else 0.0),
            # Deletions start early, so that a short soak on a slow machine deletes too.
            ("delete", self.delete, 1.5 if len(self.live) > min(POPULATION // 2, 4) else 0.0),
            ("failing build", self.break_build, 0.3 if self.live else 0.0),
            ("unready pod", self.unready_pod, 0.3 if self.live else 0.0),
            ("operator SIGKILL", self.kill_operator, 0.15 if self.may_kill else 0.0),
            ("API server and etcd restart", self.restart_api_server, 0.05),
        ]
        name, action, _ = self.rng.choices(actions, weights=[a[2] for a in actions])[0]
        action()
        if name != "change":
            self.counts[name] += 1

    def mend(self) -> None:
        """Undo the faults that do not mend themselves: failing builds and unready pods."""
        for name in sorted(self.broken):
            document = copy.deepcopy(self.live[name])
            document["spec"].pop("build", None)
            self._apply(document)
        self.broken.clear()
        for pod in self.unready:
            try:
                _set_ready(self.kube, self.namespace, pod, ready=True, restarts=1)
            except k8s.ApiException as gone:
                if gone.status != 404:  # a rollout may have replaced it meanwhile
                    raise
        self.unready.clear()


@pytest.mark.timeout(SECONDS + 900)
@pytest.mark.usefixtures("room")
def test_soak_random_changes_and_faults_end_consistent_with_flat_memory(
    api_client: k8s.ApiClient,
    kube: Kube,
    resources: Resources,
    namespace: str,
    operator: OperatorProcess,
    local_cluster: LocalCluster,
) -> None:
    rng = random.Random(SEED)
    soak = Soak(resources, kube, namespace, operator, local_cluster, rng)
    say(
        f"{SECONDS:.0f} s, checkpoints every {CHECKPOINT_SECONDS:.0f} s, population {POPULATION}, seed {SEED}"
    )
    started = time.monotonic()
    next_check = started + CHECKPOINT_SECONDS
    samples: list[tuple[float, float]] = []  # (elapsed s, operator RSS MiB) in the second half
    checkpoints = steps = 0
    while True:
        now = time.monotonic()
        if now >= next_check or now - started >= SECONDS:
            soak.mend()
            seconds = converge(api_client, namespace, f"checkpoint {checkpoints + 1}", timeout=300)
            checkpoints += 1
            assert operator.process is not None
            rss = _rss_mib(operator.process.pid)
            elapsed = time.monotonic() - started
            if not soak.may_kill:
                samples.append((elapsed, rss))
            say(
                f"checkpoint {checkpoints} at {elapsed:.0f} s: {len(soak.live)} resources consistent after "
                f"{seconds:.1f} s; operator RSS {rss:.0f} MiB; {steps} actions so far"
            )
            # Three checkpoints at least, however slowly a loaded machine converges.
            if elapsed >= SECONDS and checkpoints >= MIN_CHECKPOINTS:
                if soak.counts["delete"] == 0 and soak.live:
                    # A slow machine may not have drawn a delete: make one and converge once more.
                    soak.delete()
                    soak.counts["delete"] += 1
                    next_check = time.monotonic()
                    continue
                break
            soak.may_kill = elapsed < SECONDS / 2
            next_check = time.monotonic() + CHECKPOINT_SECONDS
        soak.step()
        steps += 1
        time.sleep(rng.uniform(0.2, 1.0))
    say(f"{steps} actions: {dict(sorted(soak.counts.items()))}")
    say(f"operator RSS in the second half (s, MiB): {[(round(t), round(m, 1)) for t, m in samples]}")
    assert checkpoints >= MIN_CHECKPOINTS
    assert soak.counts["create"] > 0 and soak.counts["delete"] > 0
    if len(samples) >= 2:
        first, last = samples[0][1], samples[-1][1]
        assert last <= first * RSS_SLACK + RSS_SLACK_MIB, (
            f"operator RSS grew from {first:.0f} to {last:.0f} MiB"
        )
