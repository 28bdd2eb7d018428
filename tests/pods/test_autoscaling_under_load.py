"""Autoscaling proven under load on real pods: the short version of `make autoscale-demo`.

The session's cluster gets its metrics path (Prometheus scraping the serving pods, prometheus-adapter
behind the API server's aggregation layer); llava is applied with `serving.autoscaling` and weights whose
`seconds_per_request` knob makes the LLM double answer one request at a time, half a second each. A
bounded closed-loop load on its Service (only this cluster's addresses) fills Triton's queue; the
controller manager's real HPA controller reads the metric through custom.metrics.k8s.io and adds a pod,
which takes traffic only once its startup and readiness probes pass; when the load stops, the pods go
back to one after the scale-down window. The timeline is printed (`-s`) and kept as a plot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.autoscale_proof import ProofSettings, resource_document, run_proof, weights_on_a_claim
from mmd_operator.cli.localcluster.cluster import LocalCluster
from mmd_operator.scaling_metrics import ScalingMetric
from tests.support.kube import Kube, Resources
from tests.support.pods import service_ip

pytestmark = pytest.mark.pods

SETTINGS = ProofSettings(
    metric=ScalingMetric.PENDING_REQUESTS,
    target=2,
    max_replicas=2,
    clients=6,
    seconds_per_request=0.5,
    scale_down_stabilization_seconds=15,
    max_load_seconds=150,
    hold_seconds=10,
    down_timeout=150,
)


@pytest.fixture(scope="module")
def metrics_path(real_cluster: LocalCluster) -> None:
    """Prometheus and prometheus-adapter on the session's cluster (idempotent)."""
    real_cluster.start_metrics()


@pytest.mark.timeout(720)
@pytest.mark.usefixtures("metrics_path")
def test_load_scales_real_serving_pods_up_on_tritons_metric_and_back_down(
    real_cluster: LocalCluster,
    api_client: Any,
    kube: Kube,
    resources: Resources,
    namespace: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    source = weights_on_a_claim(kube.core, namespace, {"seconds_per_request": SETTINGS.seconds_per_request})
    resources.apply(resource_document("llava", namespace, source, SETTINGS))
    resources.wait_phase("llava", "Ready", timeout=300)
    state = real_cluster.load_state()
    assert state is not None and state.network is not None
    url = f"grpc://{service_ip(kube, namespace, 'llava')}:8001"
    timeline = run_proof(api_client, namespace, "llava", url, state.network.supernet, SETTINGS, print)
    plot = timeline.plot(Path(tmp_path_factory.mktemp("autoscale")) / "timeline.png")
    print(f"\n{timeline.table()}\n(plot: {plot})")

    # The load saturated one pod, then two took it; no request failed on the way.
    assert timeline.load.failed == 0, timeline.load.errors
    assert timeline.peak_pods() == SETTINGS.max_replicas
    milestones = timeline.milestones()

    def first(prefix: str) -> float:
        return next(t for t, what in milestones if what.startswith(prefix))

    above, decided = first(f"{timeline.metric} above target"), first(f"HPA wants {SETTINGS.max_replicas}")
    (new_pod,) = [pod for pod in timeline.pods if pod.name not in timeline.first_pods]
    assert new_pod.started is not None and new_pod.ready is not None and new_pod.gone is not None
    # The metric crossed its target before the HPA decided; the new pod was created for that decision,
    # passed its startup probe, then became Ready; it was removed only after the load stopped.
    assert above <= decided
    assert new_pod.created >= timeline.load.started + decided - 1
    assert new_pod.created <= new_pod.started <= new_pod.ready + 1
    assert new_pod.gone > timeline.load.stopped
    # The HPA's own events and the operator's say what happened, both ways.
    reasons = [(kind, reason) for _, kind, reason, _ in timeline.events]
    assert reasons.count(("HorizontalPodAutoscaler", "SuccessfulRescale")) >= 2
    assert ("MultimodalDeployment", "Autoscaled") in reasons
    status = resources.get("llava")["status"]
    assert status["autoscaling"]["desiredReplicas"] == SETTINGS.min_replicas, status["autoscaling"]
