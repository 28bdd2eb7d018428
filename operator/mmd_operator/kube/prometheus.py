"""The figures of a Canary rollout's analysis, asked of Prometheus's HTTP API.

One instant query per counter of the runtime (`scaling_metrics.analysis_queries`: answered requests, their
latency, failed requests where the runtime counts them), each summed per pod over the analysis window. A
Prometheus that does not answer, or answers an error, gives a `Reading` with the error in words (the
analysis says it and waits); it never fails a reconcile. Nothing here carries a secret: the URL is the
operator's setting and the queries name pods. Imports the standard library, the facts and the metrics table.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from mmd_operator.facts import PodCounts, Reading
from mmd_operator.knowledge import Runtime
from mmd_operator.scaling_metrics import ANALYSIS_SERIES, analysis_queries

# A reconcile waits at most this long for each query.
QUERY_TIMEOUT_SECONDS = 5.0


def _query(url: str, promql: str) -> dict[str, float]:
    """The value per pod of an instant query's vector."""
    address = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(address, timeout=QUERY_TIMEOUT_SECONDS) as answer:
        body: Any = json.load(answer)
    if body.get("status") != "success":
        raise ValueError(f"{body.get('errorType', 'error')}: {body.get('error', 'no reason given')}")
    found = {}
    for sample in body.get("data", {}).get("result", []):
        pod = sample.get("metric", {}).get("pod")
        value = float(sample.get("value", [0, "0"])[1])
        if pod and value == value:  # NaN: no increase to take
            found[pod] = value
    return found


def read_counts(
    url: str, runtime: Runtime, namespace: str, pods: tuple[str, ...], window_seconds: int
) -> Reading:
    """The requests each of `pods` answered (and failed) over the last `window_seconds`, and their latency."""
    series = ANALYSIS_SERIES[runtime]
    try:
        values = {
            what: _query(url, promql)
            for what, promql in analysis_queries(runtime, namespace, pods, window_seconds).items()
        }
    except (OSError, ValueError, urllib.error.URLError) as error:
        return Reading(error=f"Prometheus at {url} did not answer the analysis's query: {error}")
    counts = {
        pod: PodCounts(
            answered=values["answered"].get(pod, 0.0),
            failed=values["failed"].get(pod, 0.0) if "failed" in values else None,
            latency_seconds=values["latency"].get(pod, 0.0) * series.latency_scale,
        )
        for pod in pods
    }
    return Reading(counts=counts)
