"""Build the local cluster's metrics path from the Go module proxy, once, into a cache of its own.

`python -m mmd_testbed cluster up --metrics` runs Prometheus and prometheus-adapter as pods on the real
nodes, from single-binary images written from these builds (`monitoring`). Both come from their Go
modules, pinned in `testbed/go/metrics/<name>/go.mod` (go.mod/go.sum only), static, stamped with their
versions like the upstream release builds. `promtool` is built beside Prometheus from the same module and
version, for the tests that check and unit-test the chart's alerting rules. Prometheus is built with only
the Kubernetes service discovery (its `remove_all_sd` and `enable_kubernetes_sd` build tags: the cloud
providers' SDKs are neither downloaded nor compiled) and without its web UI (the UI's assets are built by
npm and are not in the Go module; the HTTP API, which is all the adapter and the tests use, is complete).
The cache sits beside the control plane's and the nodes' and is keyed by its own wrapper modules, so a
change here rebuilds nothing else.

Imports: the standard library and `binaries`, `layout`, `processes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from mmd_testbed.localcluster.binaries import (
    BinarySpec,
    CacheDirectory,
    Printer,
    build_cache,
    build_jobs,
    module_info,
)
from mmd_testbed.localcluster.layout import Layout, MetricsVersions, Toolchain
from mmd_testbed.localcluster.processes import exclusive_lock

# A cache directory missing any of these is rebuilt whole: one built before promtool was added gets it.
METRICS_BINARY_NAMES = ("prometheus", "promtool", "prometheus-adapter")
# Prometheus's release builds use `netgo` and `builtinassets`; the second needs the npm-built UI.
_PROMETHEUS_TAGS = ("netgo", "remove_all_sd", "enable_kubernetes_sd")


@dataclass(frozen=True)
class MetricsBinaries(CacheDirectory):
    """The metrics path's cache directory."""

    versions: MetricsVersions


def metrics_binary_specs(versions: MetricsVersions, prometheus_commit: str) -> list[BinarySpec]:
    """Return the build recipe of Prometheus, its promtool and prometheus-adapter."""
    stamp = "github.com/prometheus/common/version"
    prometheus_ldflags = (
        "-s",
        "-w",
        f"-X {stamp}.Version={versions.prometheus_release}",
        f"-X {stamp}.Revision={prometheus_commit}",
        f"-X {stamp}.Branch=v{versions.prometheus_release}",
    )
    return [
        BinarySpec(
            "prometheus",
            "prometheus",
            "github.com/prometheus/prometheus/cmd/prometheus",
            _PROMETHEUS_TAGS,
            prometheus_ldflags,
        ),
        # The same tags as Prometheus, so the packages they share compile once.
        BinarySpec(
            "promtool",
            "prometheus",
            "github.com/prometheus/prometheus/cmd/promtool",
            _PROMETHEUS_TAGS,
            prometheus_ldflags,
        ),
        BinarySpec(
            "prometheus-adapter",
            "prometheus-adapter",
            "sigs.k8s.io/prometheus-adapter/cmd/adapter",
            (),
            ("-s", "-w"),
        ),
    ]


def _is_complete(root: Path) -> bool:
    return (root / "manifest.json").is_file() and all(
        (root / "bin" / name).is_file() for name in METRICS_BINARY_NAMES
    )


def ensure_metrics_binaries(layout: Layout, say: Printer = print) -> MetricsBinaries:
    """Return the cached metrics binaries of the pinned versions, building them first when missing."""
    toolchain = Toolchain.discover()
    root = layout.metrics_cache_dir(toolchain)
    if not _is_complete(root):
        lock = root.parent / ".build.lock"
        with exclusive_lock(lock, partial(say, f"==> another build holds {lock}; waiting for it")):
            if not _is_complete(root):
                _build_into(layout, toolchain, root, say)
    return MetricsBinaries(root=root, versions=layout.metrics_versions)


def _build_into(layout: Layout, toolchain: Toolchain, root: Path, say: Printer) -> None:
    versions = layout.metrics_versions
    say(f"==> building the metrics path ({versions.describe()}) with {toolchain.version}, -p {build_jobs()}")
    say(f"    cache: {root}")
    info = module_info(
        toolchain,
        layout.metrics_wrapper_dir("prometheus"),
        f"github.com/prometheus/prometheus@{versions.prometheus}",
        say,
    )
    origin = info.get("Origin")
    commit = str(origin.get("Hash", "unknown")) if isinstance(origin, dict) else "unknown"
    record = {
        "versions": {
            "prometheus": versions.prometheus_release,
            "prometheus_module": versions.prometheus,
            "prometheus_adapter": versions.prometheus_adapter,
        },
        "prometheus_commit": commit,
    }
    specs = metrics_binary_specs(versions, commit)
    seconds = build_cache(toolchain, root, specs, layout.metrics_wrapper_dir, record, say)
    size = sum((root / "bin" / name).stat().st_size for name in METRICS_BINARY_NAMES)
    say(f"==> metrics path built in {seconds['total']:.0f} s ({size / 1e6:.0f} MB of binaries in {root})")
