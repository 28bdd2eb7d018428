"""Proof under load: a bounded load saturates a serving pod, and its HorizontalPodAutoscaler adds real pods.

When the load stops it takes them away again; the timeline is recorded as a table and a plot.

Needs the local cluster with real nodes and its metrics path
(`python -m mmd_testbed cluster up --real-nodes N --metrics`:
Prometheus scrapes the serving pods, prometheus-adapter serves custom.metrics.k8s.io, the controller
manager's HPA controller reads it every 5 s), the operator from its chart, and a MultimodalDeployment with
`serving.autoscaling` whose (fake) weights carry the `seconds_per_request` knob: the `tensorrt_llm` double
then works on one request at a time for that long, so a pod answers at most 1/seconds requests per second
and what arrives faster waits in Triton's queue. Nothing is simulated by a number: the metric is what
tritonserver reports, scraped and served as on any cluster.

- `LoadGenerator`: `clients` threads, each sending one request at a time to the resource's Service over
  gRPC, until stopped or its bounds (seconds, requests) are reached; it refuses an address outside the
  local cluster's network, so it never sends a request anywhere else.
- `Recorder`: once a second, every custom metric of the pods (read through the API server, as the HPA
  reads them), the HPA's desired and current replicas, the serving pods (created, started, Ready, gone)
  and the resource's status; afterwards the HPA's and the operator's events.
- `Timeline`: the milestones (load start, metric above target, the HPA's decision, each new pod Ready,
  load stop, metric below target, the decision to scale down, back to one pod) as a table, and a plot.
- `run_proof`: the whole sequence, which tests/pods/test_autoscaling_under_load.py runs (short in
  `make test`, longer as `make autoscale-demo`).

Imports: the standard library, the kubernetes client, matplotlib (the plot), Pillow (the request's
picture), and this project's triton client, request builder, knowledge and scaling-metric tables.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlparse

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from mmctl.triton.client import TritonClient
from mmctl.triton.requests import Tensor, TextRequest, text_request
from mmd_operator.knowledge import ModelType, Runtime, knowledge_of
from mmd_operator.scaling_metrics import SCALING_METRICS, ScalingMetric, source

GROUP, VERSION = "serving.multimodal.dev", "v1alpha1"
CUSTOM_METRICS = "/apis/custom.metrics.k8s.io/v1beta1"
Printer = Callable[[str], None]


# -- the load -------------------------------------------------------------------------------------------


@dataclass
class LoadResult:
    """What the load generator sent and got back."""

    clients: int = 0
    sent: int = 0
    answered: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    started: float = 0.0
    stopped: float = 0.0

    @property
    def seconds(self) -> float:
        """How long the load ran."""
        return self.stopped - self.started


class LoadGenerator:
    """Closed-loop load on one serving endpoint: `clients` threads, one request in flight each.

    Bounded twice: it stops by itself after `max_seconds` or `max_requests`, whichever comes first. The
    URL's host must be an address inside `allowed` (the local cluster's network).
    """

    def __init__(
        self,
        url: str,
        model: str,
        tensors: Sequence[Tensor],
        *,
        clients: int,
        max_seconds: float,
        max_requests: int,
        allowed: str,
        timeout: float = 60.0,
    ) -> None:
        host = urlparse(url).hostname or ""
        if ipaddress.ip_address(host) not in ipaddress.ip_network(allowed):
            raise ValueError(f"refusing to send load to {host}: not in the local cluster's network {allowed}")
        self.url, self.model, self.tensors = url, model, list(tensors)
        self.clients, self.max_seconds, self.max_requests = clients, max_seconds, max_requests
        self.timeout = timeout
        self.result = LoadResult(clients=clients)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start the client threads."""
        self.result.started = time.time()
        self._threads = [
            threading.Thread(target=self._client, name=f"load-{i}", daemon=True) for i in range(self.clients)
        ]
        for thread in self._threads:
            thread.start()

    def _take(self) -> bool:
        with self._lock:
            if self._stop.is_set() or self.result.sent >= self.max_requests:
                return False
            if time.time() - self.result.started >= self.max_seconds:
                return False
            self.result.sent += 1
            return True

    def _client(self) -> None:
        while self._take():
            try:
                # A connection per request: the Service's kube-proxy balances connections, so a client
                # that kept one would stay with the first pod and never reach the ones the HPA adds.
                with TritonClient(self.url, timeout=self.timeout) as client:
                    for _ in client.responses(self.model, self.tensors, ["text_output"]):
                        pass
                with self._lock:
                    self.result.answered += 1
            except Exception as error:  # every failure is counted and shown, none ends the client
                with self._lock:
                    self.result.failed += 1
                    if len(self.result.errors) < 5:
                        self.result.errors.append(str(error))

    def stop(self) -> LoadResult:
        """Stop sending (requests in flight finish) and return the counts."""
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout + 5)
        self.result.stopped = time.time()
        return self.result


# -- what is recorded -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One look at the cluster, `t` seconds (wall clock) since the epoch."""

    t: float
    metrics: dict[str, float]
    desired: int | None
    current: int | None
    ready: int
    pods: int


@dataclass
class PodLife:
    """One serving pod's milestones (wall clock; None: not seen)."""

    name: str
    created: float
    started: float | None = None
    ready: float | None = None
    gone: float | None = None


def _quantity(text: str) -> float:
    """A Kubernetes quantity (`1500m`, `2`) as a number."""
    return float(parse_quantity(text))  # type: ignore[no-untyped-call]


def _timestamp(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


class Recorder:
    """Looks at the resource's pods, its HPA and the custom metrics once per `interval` seconds."""

    def __init__(
        self,
        api: k8s.ApiClient,
        namespace: str,
        name: str,
        metrics: dict[str, tuple[str, str]],
        interval: float = 1.0,
    ) -> None:
        # metrics: what a curve is called -> (custom metric, metricLabelSelector or '')
        self.api, self.namespace, self.name, self.metrics = api, namespace, name, metrics
        self.interval = interval
        self.core = k8s.CoreV1Api(api)
        self.scaling = k8s.AutoscalingV2Api(api)
        self.samples: list[Sample] = []
        self.pods: dict[str, PodLife] = {}
        self.selector = f"app.kubernetes.io/instance={name},app.kubernetes.io/component=serving"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)

    def custom_metric(self, metric: str, metric_selector: str) -> float | None:
        """The average of a custom metric over the resource's pods, as the HPA reads it; None: no value."""
        query = {"labelSelector": self.selector}
        if metric_selector:
            query["metricLabelSelector"] = metric_selector
        path = f"{CUSTOM_METRICS}/namespaces/{self.namespace}/pods/*/{metric}?{urlencode(query)}"
        _, url, headers, _, _ = self.api.param_serialize(
            method="GET", resource_path=path, header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )  # fmt: skip
        try:
            answer = self.api.call_api("GET", url, header_params=headers, _request_timeout=10)
            answer.read()
        except ApiException:
            return None
        if answer.status != 200:
            return None
        response = json.loads(answer.data)
        items = response.get("items", []) if isinstance(response, dict) else []
        if not items:
            return None
        return sum(_quantity(item["value"]) for item in items) / len(items)

    def look(self) -> Sample:
        """One sample, and the pods' milestones so far."""
        now = time.time()
        metrics = {
            label: value
            for label, (metric, selector) in self.metrics.items()
            if (value := self.custom_metric(metric, selector)) is not None
        }
        desired = current = None
        try:
            hpa: Any = self.scaling.read_namespaced_horizontal_pod_autoscaler(self.name, self.namespace)
            desired, current = hpa.status.desired_replicas, hpa.status.current_replicas
        except ApiException as error:
            if error.status != 404:
                raise
        pods: list[Any] = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        seen = set()
        ready = 0
        for pod in pods:
            name = pod.metadata.name
            seen.add(name)
            life = self.pods.setdefault(
                name, PodLife(name, _timestamp(pod.metadata.creation_timestamp) or now)
            )
            if pod.metadata.deletion_timestamp is not None:
                life.gone = life.gone or now
                continue
            statuses = pod.status.container_statuses or []
            if life.started is None and statuses and all(s.started for s in statuses):
                life.started = now
            for condition in pod.status.conditions or []:
                if condition.type == "Ready" and condition.status == "True":
                    ready += 1
                    # When first seen, like `started` (the condition's time has whole seconds only).
                    life.ready = life.ready or now
        for name, life in self.pods.items():
            if name not in seen and life.gone is None:
                life.gone = now
        live = sum(1 for life in self.pods.values() if life.gone is None)
        return Sample(now, metrics, desired, current, ready, live)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            # One missed look (the API server busy) is no gap worth stopping for; the next one follows.
            with contextlib.suppress(ApiException):
                self.samples.append(self.look())
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def start(self) -> None:
        """Start looking."""
        self._thread.start()

    def stop(self) -> None:
        """Stop looking."""
        self._stop.set()
        self._thread.join(10)

    def events(self) -> list[tuple[float, str, str, str]]:
        """(time, involved kind, reason, message) of the HPA's and the resource's events."""
        found = []
        for event in self.core.list_namespaced_event(self.namespace).items:
            kind = event.involved_object.kind
            if event.involved_object.name != self.name or kind not in (
                "HorizontalPodAutoscaler",
                "MultimodalDeployment",
            ):
                continue
            when = _timestamp(event.last_timestamp or event.event_time or event.first_timestamp)
            if when is not None:
                found.append((when, kind, event.reason, event.message))
        return sorted(found)


# -- the timeline ---------------------------------------------------------------------------------------


@dataclass
class Timeline:
    """What one proof recorded, relative to the load's start."""

    metric: str
    target: float
    load: LoadResult
    samples: list[Sample]
    pods: list[PodLife]
    events: list[tuple[float, str, str, str]]
    first_pods: set[str]

    def _at(self, t: float) -> float:
        return t - self.load.started

    def milestones(self) -> list[tuple[float, str]]:
        """(seconds since the load started, what happened), in order."""
        found: list[tuple[float, str]] = [(0.0, f"load starts ({self.load.clients} clients)")]
        during = [s for s in self.samples if self.load.started <= s.t <= self.load.stopped]
        after = [s for s in self.samples if s.t > self.load.stopped]
        above = next((s for s in during if s.metrics.get(self.metric, 0.0) > self.target), None)
        if above is not None:
            value = above.metrics[self.metric]
            found.append((self._at(above.t), f"{self.metric} above target: {value:.3g} > {self.target:g}"))
        top = 1
        for sample in during:
            if sample.desired is not None and sample.desired > top:
                found.append((self._at(sample.t), f"HPA wants {sample.desired} pods"))
                top = sample.desired
        for pod in sorted(self.pods, key=lambda p: p.created):
            if pod.name in self.first_pods:
                continue
            found.append((self._at(pod.created), f"pod {pod.name} created"))
            if pod.started is not None:
                found.append((self._at(pod.started), f"pod {pod.name} started (startup probe passed)"))
            if pod.ready is not None:
                found.append((self._at(pod.ready), f"pod {pod.name} Ready, takes traffic"))
        found.append((self._at(self.load.stopped), f"load stops ({self._load_text()})"))
        below = next((s for s in after if s.metrics.get(self.metric, 0.0) <= self.target), None)
        if below is not None:
            value = below.metrics.get(self.metric, 0.0)
            found.append((self._at(below.t), f"{self.metric} at or below target: {value:.3g}"))
        down = next((s for s in after if s.desired is not None and s.desired < top), None)
        if down is not None:
            found.append(
                (self._at(down.t), f"HPA wants {down.desired} pod{'s' if down.desired != 1 else ''}")
            )
        for pod in self.pods:
            if pod.gone is not None and pod.gone > self.load.stopped:
                found.append((self._at(pod.gone), f"pod {pod.name} removed"))
        for when, kind, reason, message in self.events:
            if when >= self.load.started - 1:
                found.append((self._at(when), f"event {kind} {reason}: {message}"))
        # By time alone: what happened in the same look keeps its order (created, started, Ready).
        return sorted(found, key=lambda item: item[0])

    def _load_text(self) -> str:
        rate = self.load.answered / max(self.load.seconds, 1e-9)
        load = self.load
        return f"{load.sent} requests, {load.answered} answered, {load.failed} failed, {rate:.1f}/s"

    def table(self) -> str:
        """The milestones as a Markdown table."""
        rows = ["| t (s) | what |", "|---:|---|"]
        rows += [f"| {t:6.1f} | {what} |" for t, what in self.milestones()]
        return "\n".join(rows)

    def peak_pods(self) -> int:
        """The most Ready serving pods seen."""
        return max((s.ready for s in self.samples), default=0)

    def plot(self, path: Path) -> Path:
        """The metric and the pods over time, as a PNG at `path`."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        times = [self._at(s.t) for s in self.samples]
        names = sorted({m for s in self.samples for m in s.metrics})
        panels = [
            ("queue time per request (s)", [n for n in names if "queue_time" in n]),
            ("pending requests", [n for n in names if "pending" in n]),
        ]
        figure, axes = plt.subplots(3, 1, sharex=True, figsize=(9, 8))
        for axis, (label, curves) in zip(axes, panels, strict=False):
            for name in curves:
                style = "-" if name == self.metric else ":"
                axis.plot(times, [s.metrics.get(name) for s in self.samples], style, label=name)
            if self.metric in curves:
                axis.axhline(self.target, color="red", linestyle="--", label=f"HPA target {self.target:g}")
            axis.set_ylabel(label)
            if axis.get_legend_handles_labels()[0]:
                axis.legend(loc="upper right", fontsize=7)
        pods = axes[2]
        pods.step(times, [s.desired for s in self.samples], where="post", label="HPA desired")
        pods.step(times, [s.ready for s in self.samples], where="post", label="pods Ready")
        pods.step(times, [s.pods for s in self.samples], where="post", label="pods", linestyle=":")
        pods.set_ylabel("serving pods")
        pods.set_xlabel("seconds since the load started")
        pods.legend(loc="upper right", fontsize=7)
        for axis in axes:
            axis.axvspan(0, self._at(self.load.stopped), color="orange", alpha=0.12)
        axes[0].set_title(f"HorizontalPodAutoscaler on {self.metric} (load shaded)")
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=100)
        plt.close(figure)
        return path

    def to_json(self) -> str:
        """Everything recorded, for later plots."""
        return json.dumps(
            {
                "metric": self.metric,
                "target": self.target,
                "load": dataclasses.asdict(self.load),
                "samples": [dataclasses.asdict(s) for s in self.samples],
                "pods": [dataclasses.asdict(p) for p in self.pods],
                "events": self.events,
                "milestones": self.milestones(),
            },
            indent=1,
        )


# -- the proof ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProofSettings:
    """One proof's knobs: the resource's autoscaling, the double's pace, the load and its bounds."""

    metric: ScalingMetric = ScalingMetric.PENDING_REQUESTS
    # In the spec's unit (requests; milliseconds for QueueTimePerRequest).
    target: int = 2
    min_replicas: int = 1
    max_replicas: int = 3
    scale_up_stabilization_seconds: int = 0
    scale_down_stabilization_seconds: int = 30
    seconds_per_request: float = 0.5
    # The entry model the clients call: the ensemble, as the reference clients do. Its own queue time and
    # pending count stay near zero (Triton's ensemble scheduler starts a request the moment it arrives;
    # measured: 4 us per request while tensorrt_llm's requests waited 1.2 s), but the metric adds up the
    # queues of every model, so it sees the wait in tensorrt_llm's.
    entry_model: str = "ensemble"
    clients: int = 8
    # The load stops by itself after this long or this many requests.
    max_load_seconds: float = 150.0
    max_requests: int = 2000
    # Once the HPA has all the pods it wants Ready, the load goes on this long.
    hold_seconds: float = 15.0
    # How long the pods may take to go back to min_replicas after the load.
    down_timeout: float = 180.0

    def autoscaling(self) -> dict[str, Any]:
        """The resource's `serving.autoscaling`."""
        return {
            "minReplicas": self.min_replicas,
            "maxReplicas": self.max_replicas,
            "metric": {"name": self.metric.value, "target": self.target},
            "scaleUpStabilizationSeconds": self.scale_up_stabilization_seconds,
            "scaleDownStabilizationSeconds": self.scale_down_stabilization_seconds,
        }

    def threshold(self) -> float:
        """The target in the custom metric's unit (what the HPA compares the average with)."""
        return _quantity(SCALING_METRICS[self.metric].average_value(self.target))


def resource_document(
    name: str, namespace: str, source: dict[str, Any], settings: ProofSettings
) -> dict[str, Any]:
    """A LLaVA MultimodalDeployment with `serving.autoscaling` from `settings`, its weights from `source`."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MultimodalDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"type": "llava", **source},
            "serving": {"autoscaling": settings.autoscaling()},
        },
    }


def recorded_metrics(hpa: Any, runtime: Runtime = Runtime.TRITON_TRTLLM_ENGINE) -> dict[str, tuple[str, str]]:
    """Every scaling metric of the runtime as the HPA reads it, and where the requests pend.

    The HPA's metric comes first, under its own name; then the runtime's other metrics; then the pending
    requests of the `tensorrt_llm` model (where requests wait for the engine) and of the `ensemble`, for
    comparison: a metric selector narrows that plain sum to one model (the queue time's ratio divides by
    the entry models' requests, so it has no value of one model).
    """
    found = {hpa.spec.metrics[0].pods.metric.name: (hpa.spec.metrics[0].pods.metric.name, "")}
    for scaling in ScalingMetric:
        metric_source = source(scaling, runtime)
        if metric_source is not None:
            found.setdefault(metric_source.custom_metric, (metric_source.custom_metric, ""))
    pending = source(ScalingMetric.PENDING_REQUESTS, runtime)
    if pending is not None:
        for model in ("tensorrt_llm", "ensemble"):
            found[f"{pending.custom_metric} ({model})"] = (pending.custom_metric, f"model={model}")
    return found


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 1.0) -> Any:
    """Poll `check` until it returns something true; raise TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def run_proof(
    api: k8s.ApiClient,
    namespace: str,
    name: str,
    url: str,
    allowed: str,
    settings: ProofSettings,
    say: Printer,
) -> Timeline:
    """Saturate the resource's one pod, follow the scale-up, stop, follow the scale-down; the timeline.

    The resource must be Ready with its HorizontalPodAutoscaler. Raises TimeoutError when the pods do
    not come back to `min_replicas` within `settings.down_timeout` after the load.
    """
    scaling = k8s.AutoscalingV2Api(api)
    hpa = scaling.read_namespaced_horizontal_pod_autoscaler(name, namespace)
    metrics = recorded_metrics(hpa)
    hpa_metric = hpa.spec.metrics[0].pods.metric.name
    recorder = Recorder(api, namespace, name, metrics)
    say(f"  waiting until the HPA reads {hpa_metric} from the serving pod (scraped, listed by the adapter)")
    wait_for(
        f"{hpa_metric} through custom.metrics.k8s.io", lambda: hpa_metric in recorder.look().metrics, 120
    )
    first_pods = set(recorder.pods)
    knowledge = knowledge_of(ModelType.LLAVA)
    picture = Path(tempfile.mkdtemp(prefix="mmd-autoscale-")) / "red.png"
    _write_picture(picture)
    tensors = text_request(
        knowledge, TextRequest("What is in this picture?", images=[str(picture)], max_tokens=8)
    )
    load = LoadGenerator(
        url, settings.entry_model, tensors, clients=settings.clients, max_seconds=settings.max_load_seconds,
        max_requests=settings.max_requests, allowed=allowed,
    )  # fmt: skip
    recorder.start()
    say(
        f"  load: {settings.clients} clients, one request in flight each, to {url} "
        f"(at most {settings.max_load_seconds:.0f} s or {settings.max_requests} requests); "
        f"a pod answers at most {1 / settings.seconds_per_request:.1f} requests/s"
    )
    load.start()
    try:

        def scaled_up() -> bool:
            last = recorder.samples[-1] if recorder.samples else None
            return (
                last is not None
                and last.desired is not None
                and last.desired > 1
                and last.ready >= last.desired
            )

        bound = settings.max_load_seconds - settings.hold_seconds
        try:
            wait_for("the HPA's pods to be Ready under load", scaled_up, bound)
            top = recorder.samples[-1]
            say(f"  {top.ready} pods Ready after {time.time() - load.result.started:.0f} s of load; holding")
            time.sleep(settings.hold_seconds)
        except TimeoutError as error:
            say(f"  {error}")
    finally:
        result = load.stop()
    say(
        f"  load stopped after {result.seconds:.0f} s: {result.sent} sent, {result.answered} answered, "
        f"{result.failed} failed"
    )

    def back_down() -> bool:
        last = recorder.samples[-1] if recorder.samples else None
        return (
            last is not None and last.desired == settings.min_replicas and last.pods == settings.min_replicas
        )

    try:
        wait_for(f"the serving pods back at {settings.min_replicas}", back_down, settings.down_timeout)
        time.sleep(2)
    finally:
        recorder.stop()
    return Timeline(
        metric=hpa_metric,
        target=settings.threshold(),
        load=result,
        samples=recorder.samples,
        pods=list(recorder.pods.values()),
        events=recorder.events(),
        first_pods=first_pods,
    )


def _write_picture(path: Path) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 32), (200, 10, 10)).save(path)


def weights_on_a_claim(
    core: k8s.CoreV1Api,
    namespace: str,
    knobs: dict[str, float],
    write_checkpoint: Callable[[Path], None],
    path: str = "llava-1.5-7b",
) -> dict[str, Any]:
    """A claim holding a (fake) checkpoint at `path` whose config carries the doubles' `knobs`; the source.

    `write_checkpoint` writes the checkpoint into a directory; it goes into the claim's local-path
    volume from this host, then its `config.json` gets the knobs. The claim is made once per namespace:
    each further call adds a checkpoint beside the others.
    """
    claim = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}
    try:
        core.create_namespaced_persistent_volume_claim(
            namespace, {"metadata": {"name": "weights"}, "spec": claim}
        )
    except ApiException as error:
        if error.status != 409:
            raise

    def bound_volume() -> str | None:
        found: Any = core.read_namespaced_persistent_volume_claim("weights", namespace)
        return str(found.spec.volume_name) if found.status.phase == "Bound" else None

    volume = wait_for("the weights claim to bind", bound_volume, 60, 0.5)
    persistent: Any = core.read_persistent_volume(volume)
    model = Path(persistent.spec.host_path.path) / path
    write_checkpoint(model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "mmd_double": knobs}))
    return {"source": {"pvc": {"claimName": "weights", "path": path}}}
