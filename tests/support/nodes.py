"""Extra fake GPU nodes for a test: created as the local cluster makes its own, Ready when returned,
deleted afterwards. Imports the local cluster's node objects and the test API handles."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes.client.exceptions import ApiException

from mmd_testbed.localcluster.objects import NodePool, gpu_node
from tests.support.kube import Kube


@contextmanager
def extra_gpu_nodes(
    kube: Kube,
    pool: NodePool,
    *,
    taints: tuple[dict[str, str], ...] = (),
    labels: dict[str, str] | None = None,
) -> Iterator[list[str]]:
    """The nodes of `pool`, with `taints` and `labels` added to their own, Ready while the block runs.

    Ready, and without the node controller's `not-ready` taint, which it takes off a moment after the
    node reports Ready: a test that reads the nodes' taints would otherwise find it.
    """
    names = pool.node_names()
    for name in names:
        node: dict[str, Any] = gpu_node(name, pool)
        node["spec"]["taints"] = list(taints)
        node["metadata"]["labels"].update(labels or {})
        try:
            kube.core.create_node(node)
        except ApiException as error:
            if error.status != 409:
                raise

    wanted = {(taint["key"], taint["effect"]) for taint in taints}

    def ready() -> bool:
        nodes = {n.metadata.name: n for n in kube.core.list_node(label_selector="type=kwok").items}
        return all(
            name in nodes
            and any(c.type == "Ready" and c.status == "True" for c in nodes[name].status.conditions or [])
            and {(t.key, t.effect) for t in nodes[name].spec.taints or []} == wanted
            for name in names
        )

    kube.wait_for(f"nodes {', '.join(names)} to be Ready", ready, timeout=60)
    try:
        yield names
    finally:
        for name in names:
            kube.core.delete_node(name)
