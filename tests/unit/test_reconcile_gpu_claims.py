"""GPUs asked for by claim (`spec.gpus.resourceClaim`), through whole reconciles on the in-memory API server.

The devices are ResourceSlices as NVIDIA's DRA driver publishes them: the kind of GPU comes from the
devices the class and the selector admit; one template per GPU count pins that kind; the build and
serving pods take their claims from it and ask for no `nvidia.com/gpu`; a selector that admits two
kinds is refused naming both.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from mmd_operator.config import OperatorConfig
from mmd_operator.reconcile import Reconciler
from mmd_operator.vocabulary import kinds
from tests.support.examples import EXAMPLES_DIR
from tests.support.gpu_kinds import add_dra_gpus
from tests.support.in_memory_cluster import InMemoryCluster, the_operators_writes

NS = "ml"
H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'


@pytest.fixture
def cluster() -> InMemoryCluster:
    cluster = InMemoryCluster()
    add_dra_gpus(cluster, "node-a", "NVIDIA A100-SXM4-80GB", "8.0")
    add_dra_gpus(cluster, "node-h", "NVIDIA H100 80GB HBM3", "9.0")
    return cluster


@pytest.fixture
def reconciler(cluster: InMemoryCluster) -> Iterator[Reconciler]:
    running = Reconciler(cluster.client, cluster.store, OperatorConfig())
    yield running
    running.events.close()


def _llava(cluster: InMemoryCluster, claim: dict[str, Any]) -> None:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES_DIR / "llava.yaml").read_text())
    document["metadata"]["namespace"] = NS
    document["spec"]["gpus"] = {"resourceClaim": claim}
    cluster.create(document)
    cluster.feed()


def _status(cluster: InMemoryCluster, reconciler: Reconciler) -> dict[str, Any]:
    reconciler.reconcile(NS, "llava")
    cluster.feed()
    resource = cluster.server.get(kinds.MULTIMODAL_DEPLOYMENT, NS, "llava")
    assert resource is not None
    return dict(resource["status"])


def test_a_selector_of_one_kind_builds_for_it_and_claims_gpus_of_it(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    _llava(cluster, {"selector": H100})
    status = _status(cluster, reconciler)
    assert status["engine"]["gpu"] == {"product": "NVIDIA-H100-80GB-HBM3", "computeCapability": "9.0"}
    (template,) = cluster.server.all(kinds.RESOURCE_CLAIM_TEMPLATE, NS)
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "gpus"
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert request["exactly"]["count"] == 1
    assert [s["cel"]["expression"] for s in request["exactly"]["selectors"]] == [
        H100,
        'device.attributes["gpu.nvidia.com"].productName.matches("^NVIDIA[ -]H100[ -]80GB[ -]HBM3$")',
    ]
    (job,) = cluster.server.all(kinds.JOB, NS)
    pod = job["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    (builder,) = pod["containers"]
    assert builder["resources"]["claims"] == [{"name": "gpus"}]
    assert "nvidia.com/gpu" not in builder["resources"].get("limits", {})
    assert "nodeSelector" not in pod or "nvidia.com/gpu.product" not in pod["nodeSelector"]
    settled = len(cluster.server.requests)
    _status(cluster, reconciler)
    assert the_operators_writes(cluster, settled) == []


def test_a_selector_of_two_kinds_is_refused_naming_both(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    _llava(cluster, {})
    status = _status(cluster, reconciler)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    message = " ".join(ready["message"].split())
    assert (status["phase"], ready["reason"]) == ("Failed", "InvalidSpec")
    assert "spec.gpus.resourceClaim.selector: reaches 2 kinds of GPU" in message
    assert "NVIDIA-A100-SXM4-80GB (compute capability 8.0) on 1 node(s): node-a" in message
    assert "NVIDIA-H100-80GB-HBM3 (compute capability 9.0) on 1 node(s): node-h" in message
    assert "narrow spec.gpus.resourceClaim.selector to one of them" in message
    assert cluster.server.all(kinds.RESOURCE_CLAIM_TEMPLATE, NS) == []
    assert cluster.server.all(kinds.JOB, NS) == []


def test_a_version_selector_is_evaluated_as_the_api_server_would(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    capability = 'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.9.0"))'
    _llava(cluster, {"selector": capability})
    status = _status(cluster, reconciler)
    assert status["engine"]["gpu"]["product"] == "NVIDIA-H100-80GB-HBM3"


def test_a_changed_selector_s_old_template_stays_while_the_job_names_it_then_goes(
    cluster: InMemoryCluster, reconciler: Reconciler
) -> None:
    _llava(cluster, {"selector": H100})
    _status(cluster, reconciler)
    (old,) = cluster.server.all(kinds.RESOURCE_CLAIM_TEMPLATE, NS)
    (job,) = cluster.server.all(kinds.JOB, NS)
    # The same kind by another selector: a new template; the running build keeps the one it took.
    capability = 'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.9.0"))'
    _llava(cluster, {"selector": capability})
    _status(cluster, reconciler)
    names = {
        template["metadata"]["name"] for template in cluster.server.all(kinds.RESOURCE_CLAIM_TEMPLATE, NS)
    }
    assert old["metadata"]["name"] in names and len(names) == 2, names
    # Once the Job is gone (a user deleted it), a new one takes the new template and the old one goes.
    cluster.kubectl.delete(job["apiVersion"], job["kind"], NS, job["metadata"]["name"])
    cluster.feed()
    _status(cluster, reconciler)
    _status(cluster, reconciler)
    (new,) = cluster.server.all(kinds.RESOURCE_CLAIM_TEMPLATE, NS)
    assert new["metadata"]["name"] in names - {old["metadata"]["name"]}
    (rebuilt,) = cluster.server.all(kinds.JOB, NS)
    claims = rebuilt["spec"]["template"]["spec"]["resourceClaims"]
    assert claims == [{"name": "gpus", "resourceClaimTemplateName": new["metadata"]["name"]}]
