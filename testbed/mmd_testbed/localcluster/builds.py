"""Build what a command needs at once: two Go caches at a time, and the images beside them.

The Go caches (the control plane, the real nodes' components and their fake GPU device plugin,
LeaderWorkerSet, the metrics path, the GitOps checker) are separate builds under locks of their own, into
one Go build cache. One `go build` leaves cores idle while it downloads modules, links a binary or
compiles a large package that others wait for; two at once fill most of those gaps. They are started in
`CACHES`' order, so that the control plane runs beside the nodes' own components, and the nodes' kubelet
and kube-proxy, built last, find the Kubernetes packages they share with it compiled (`nodebinaries`).
The images mostly wait on the network and the disk, and are built beside all of it
(`images.build_beside`). Once every build succeeded, Go's own caches are removed (`binaries.go_caches`):
the binaries are what later runs use. Each build's lines are marked with its name; `make test` and
`make demo` record the seconds of each in docs/development/times.md.

Imports: the standard library and the caches' modules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from mmd_testbed.localcluster import images
from mmd_testbed.localcluster.binaries import Printer, drop_go_caches, ensure_binaries, go_caches
from mmd_testbed.localcluster.fakegpu import ensure_fake_gpu
from mmd_testbed.localcluster.gitops_check import ensure_gitops_check
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.lwsbinaries import ensure_lws_binaries
from mmd_testbed.localcluster.metricsbinaries import ensure_metrics_binaries
from mmd_testbed.localcluster.nodebinaries import ensure_node_binaries

# Every Go cache, in the order builds start.
CACHES: dict[str, Callable[[Layout, Printer], object]] = {
    "control plane": ensure_binaries,
    "nodes": ensure_node_binaries,
    "fake GPU plugin": ensure_fake_gpu,
    "LeaderWorkerSet": ensure_lws_binaries,
    "metrics": ensure_metrics_binaries,
    "GitOps checker": ensure_gitops_check,
}
# Go builds at once.
LANES = 2


class BuildsFailedError(Exception):
    """One or more builds failed; the message holds each failure."""


def ensure_all(
    layout: Layout, say: Printer, caches: Sequence[str], *, with_images: bool = False
) -> dict[str, images.BuiltImage]:
    """Build the `caches` missing from the cache (and the local images); returns the images built.

    Waits for every build, then raises `BuildsFailedError` naming each one that failed.
    """
    unknown = set(caches) - set(CACHES)
    if unknown:
        raise ValueError(f"no such cache: {', '.join(sorted(unknown))}")
    pending_images = images.build_beside(layout, say) if with_images else None
    failures: list[str] = []
    with ThreadPoolExecutor(max_workers=LANES, thread_name_prefix="go-build") as lanes:
        started: dict[str, Future[object]] = {
            name: lanes.submit(CACHES[name], layout, _marked(say, name)) for name in CACHES if name in caches
        }
        for name, future in started.items():
            error = future.exception()
            if error is not None:
                failures.append(f"{name}: {error}")
    built: dict[str, images.BuiltImage] = {}
    if pending_images is not None:
        try:
            built = pending_images.result()
        except Exception as error:
            failures.append(f"images: {error}")
    if failures:
        raise BuildsFailedError("\n".join(failures))
    drop_go_caches(go_caches(layout.cache_root), say)
    return built


def _marked(say: Printer, name: str) -> Printer:
    return lambda line: say(f"[{name}] {line}")
