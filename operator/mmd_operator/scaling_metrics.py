"""The metrics `spec.serving.autoscaling` scales on and a canary is judged on, in one table, and the rules.

A spec names a metric (`ScalingMetric`); each runtime that can serve it has a `MetricSource` here: the
Prometheus series its pods expose, the query that turns them into one value per pod, and the name of the
custom metric (custom.metrics.k8s.io) the adapter serves that value under, which the operator's
HorizontalPodAutoscaler asks for. A runtime that cannot serve a metric has the reason instead, which the
CRD's rule quotes when it refuses the combination. `adapter_rules()` renders the table as the rules a
prometheus-adapter must be configured with (`adapter_config_yaml()` as its config file): the one place
where the custom-metric names are spelled, for the operator, the docs and the local cluster's adapter.

On Triton the wait of a request is wherever it is: Triton's ensemble scheduler starts an ensemble request
the moment it arrives (the `ensemble` model's queue time and pending count stay near zero) and the
request then waits in the queues of the models it composes; a BLS entry point queues it itself, then its
calls queue in the models it calls. So the queue time adds up every model's queue of the pod and divides
it by the requests the entry models answered (each client request counted once), and the pending count
adds up every model's (a request pends at one hop at a time). The entry-model filter is in the query: the
HPA asks for the metric without a selector.

A Canary rollout's analysis (`ANALYSIS_SERIES`) reads each runtime's counters of answered and failed
requests and of their latency, per pod, straight from Prometheus (`analysis_queries`).

Both ratios give 0, not nothing, for a pod that served no request in the window: an absent value would
keep the autoscaler from scaling an idle Deployment down. Pure: imports the knowledge table's runtimes and
PyYAML; no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import yaml

from mmd_operator.knowledge import Runtime


class ScalingMetric(StrEnum):
    """What the autoscaler compares with the spec's target, per serving pod."""

    # Average time a request waited in the server's queue before it ran, over the last window.
    QUEUE_TIME_PER_REQUEST = "QueueTimePerRequest"
    # Requests the server holds that have not started (a gauge, read as it is).
    PENDING_REQUESTS = "PendingRequests"


# Triton's entry points that clients call: their answered requests are the queue time's denominator.
TRITON_ENTRY_MODELS = ("ensemble", "tensorrt_llm_bls", "whisper_bls")
# The window the rates are taken over: at least two scrapes must fall in it (scrape every 15 s or less).
RATE_WINDOW = "1m"
# The labels a Prometheus scrape of pods puts on every series (a PodMonitor or the usual relabelling);
# the adapter maps them to the pod and its namespace.
POD_LABELS = {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}


@dataclass(frozen=True)
class MetricSource:
    """How one runtime's pods expose a scaling metric, and what the adapter calls it."""

    # The name HorizontalPodAutoscalers ask custom.metrics.k8s.io for.
    custom_metric: str
    # The series the adapter discovers the metric by.
    series: str
    # The adapter's metricsQuery: one value per pod (`<<.GroupBy>>`), on the pods asked for
    # (`<<.LabelMatchers>>`). `{window}` is the rate window.
    query: str


@dataclass(frozen=True)
class ScalingMetricFacts:
    """One metric: what it measures, its target's unit, and where each runtime has it."""

    metric: ScalingMetric
    what: str
    # The unit of `metric.target` in the spec.
    target_unit: str
    # The custom metric's unit: the target is written as an HPA quantity in it.
    quantity_suffix: str
    sources: Mapping[Runtime, MetricSource]
    # Runtimes without the metric, and why (the CRD's refusal says it).
    unavailable: Mapping[Runtime, str] = field(default_factory=lambda: MappingProxyType({}))

    def average_value(self, target: int) -> str:
        """`target` (in `target_unit`) as the HPA's averageValue quantity in the custom metric's unit."""
        return f"{target}{self.quantity_suffix}"


def _ratio(numerator: str, denominator: str, scale: str = "", denominator_matchers: str = "") -> str:
    """rate(numerator) / rate(denominator) per pod, and 0 where the denominator did not move.

    `denominator_matchers` (`label=~"..."`) narrows the denominator's series beside the pods'.
    """
    top = f"sum by (<<.GroupBy>>) (rate({numerator}{{<<.LabelMatchers>>}}[{{window}}]))"
    bottom_matchers = (
        f"{denominator_matchers},<<.LabelMatchers>>" if denominator_matchers else "<<.LabelMatchers>>"
    )
    bottom = f"sum by (<<.GroupBy>>) (rate({denominator}{{{bottom_matchers}}}[{{window}}]))"
    return f"({top} / ({bottom} > 0){scale}) or ({bottom} * 0)"


SCALING_METRICS: Mapping[ScalingMetric, ScalingMetricFacts] = MappingProxyType(
    {
        ScalingMetric.QUEUE_TIME_PER_REQUEST: ScalingMetricFacts(
            metric=ScalingMetric.QUEUE_TIME_PER_REQUEST,
            what="queue time per request",
            target_unit="ms",
            # Milliseconds of a metric in seconds: `200` is `200m`.
            quantity_suffix="m",
            sources=MappingProxyType(
                {
                    # Cumulative microseconds in the queues of every model, over the successful requests
                    # of the entry models.
                    Runtime.TRITON_TRTLLM_ENGINE: MetricSource(
                        custom_metric="mmd_triton_queue_time_per_request_seconds",
                        series="nv_inference_queue_duration_us",
                        query=_ratio(
                            "nv_inference_queue_duration_us",
                            "nv_inference_request_success",
                            " / 1e6",
                            denominator_matchers=f'model=~"{"|".join(TRITON_ENTRY_MODELS)}"',
                        ),
                    ),
                    # The request queue-time histogram (TensorRT-LLM 1.2.1, return_perf_metrics).
                    Runtime.TRTLLM_SERVE: MetricSource(
                        custom_metric="mmd_trtllm_serve_queue_time_per_request_seconds",
                        series="trtllm_request_queue_time_seconds_count",
                        query=_ratio(
                            "trtllm_request_queue_time_seconds_sum", "trtllm_request_queue_time_seconds_count"
                        ),
                    ),
                }
            ),
        ),
        ScalingMetric.PENDING_REQUESTS: ScalingMetricFacts(
            metric=ScalingMetric.PENDING_REQUESTS,
            what="pending requests",
            target_unit="requests",
            quantity_suffix="",
            sources=MappingProxyType(
                {
                    Runtime.TRITON_TRTLLM_ENGINE: MetricSource(
                        custom_metric="mmd_triton_pending_requests",
                        series="nv_inference_pending_request_count",
                        # Every model's: a request pends at one of them at a time.
                        query=(
                            "sum by (<<.GroupBy>>) (nv_inference_pending_request_count{<<.LabelMatchers>>})"
                        ),
                    )
                }
            ),
            unavailable=MappingProxyType(
                {
                    Runtime.TRTLLM_SERVE: (
                        "TensorRT-LLM 1.2.1's /prometheus/metrics has no gauge of waiting requests (only "
                        "request counters and latency histograms; trtllm_num_requests_waiting came with the "
                        "1.3 line)"
                    )
                }
            ),
        ),
    }
)


def source(metric: ScalingMetric, runtime: Runtime) -> MetricSource | None:
    """Where `runtime`'s pods have `metric`; None when they do not."""
    return SCALING_METRICS[metric].sources.get(runtime)


def metrics_of(runtime: Runtime) -> list[ScalingMetric]:
    """The metrics `runtime`'s pods expose, in the table's order."""
    return [facts.metric for facts in SCALING_METRICS.values() if runtime in facts.sources]


def adapter_rules(window: str = RATE_WINDOW) -> list[dict[str, Any]]:
    """prometheus-adapter's `rules` for every custom metric of the table, rates over `window`.

    Each exposes one metric per pod, named as the HPAs the operator creates ask for it; the series must
    carry `namespace` and `pod` labels (a PodMonitor's scrape does).
    """
    rules = []
    for facts in SCALING_METRICS.values():
        for metric_source in facts.sources.values():
            rules.append(
                {
                    "seriesQuery": f'{metric_source.series}{{namespace!="",pod!=""}}',
                    # A copy each: shared dicts would be written as YAML anchors and aliases.
                    "resources": {"overrides": copy.deepcopy(POD_LABELS)},
                    "name": {"matches": f"^{metric_source.series}$", "as": metric_source.custom_metric},
                    "metricsQuery": metric_source.query.replace("{window}", window),
                }
            )
    return rules


def adapter_config_yaml(window: str = RATE_WINDOW) -> str:
    """The rules as prometheus-adapter's config file (`--config`).

    prometheus-adapter's Helm chart takes the same list as the value `rules.custom`.
    """
    header = (
        "# prometheus-adapter rules for MultimodalDeployment autoscaling (mmd_operator.scaling_metrics)\n"
    )
    return header + yaml.safe_dump({"rules": adapter_rules(window)}, sort_keys=False, width=1000)


@dataclass(frozen=True)
class AnalysisSeries:
    """The counters a canary's analysis reads from one runtime's pods."""

    # Requests answered, and the seconds they took added up (`latency_scale` turns its unit to seconds).
    answered: str
    latency: str
    latency_scale: float
    # Requests that failed; None: the runtime counts none (`failures_unavailable` says why).
    failed: str | None = None
    failures_unavailable: str = ""
    # Label matchers beside the pods' (`label=~"..."`).
    matchers: str = ""


ANALYSIS_SERIES: Mapping[Runtime, AnalysisSeries] = MappingProxyType(
    {
        # Counted at the entry models, so each client request once.
        Runtime.TRITON_TRTLLM_ENGINE: AnalysisSeries(
            answered="nv_inference_request_success",
            latency="nv_inference_request_duration_us",
            latency_scale=1e-6,
            failed="nv_inference_request_failure",
            matchers=f'model=~"{"|".join(TRITON_ENTRY_MODELS)}"',
        ),
        Runtime.TRTLLM_SERVE: AnalysisSeries(
            answered="trtllm_e2e_request_latency_seconds_count",
            latency="trtllm_e2e_request_latency_seconds_sum",
            latency_scale=1.0,
            failures_unavailable=(
                "TensorRT-LLM 1.2.1 counts answered requests only (trtllm_request_success_total, "
                "trtllm_e2e_request_latency_seconds): a request it answers with an error is not counted"
            ),
        ),
    }
)


def analysis_queries(
    runtime: Runtime, namespace: str, pods: tuple[str, ...], window_seconds: int
) -> dict[str, str]:
    """PromQL per counter ("answered", "latency", "failed" where counted).

    Each gives what every pod of `pods` counted over the last `window_seconds`.
    """
    series = ANALYSIS_SERIES[runtime]
    pod_names = "|".join(pods)
    matchers = f'namespace="{namespace}",pod=~"{pod_names}"' + (
        f",{series.matchers}" if series.matchers else ""
    )
    counters = {"answered": series.answered, "latency": series.latency}
    if series.failed is not None:
        counters["failed"] = series.failed

    def since(name: str) -> str:
        # The counter now less its value a window ago: the requests counted in the window, exactly
        # (`increase` extrapolates to the window's edges: 6 where 3 were sent). A pod younger than the
        # window, or whose counter restarted, counts from its start.
        now = f"{name}{{{matchers}}}"
        return f"sum by (pod) ((({now} - {now} offset {window_seconds}s) >= 0) or {now})"

    return {what: since(name) for what, name in counters.items()}
