"""The trtllm-serve runtime on the real control plane, with the operator in its own process.

kwok runs no download program: its stage for download pods ends them with the download's own success line
(the commit made up as `tests/support/downloads.commit_of` does), or as a resource's `spec.build.pod`
scripts it (a failure line, a SIGKILL). Covered: a resource from
apply to Ready (the resolved commit in status, the index and the Deployment's argv), one download shared
by two resources and a cache hit for a third and for one naming the commit, a volume source with no
download, a failed download and a killed one with their recovery, a serving-only change with no new
download, refusals at admission and by the operator, and no write at rest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from engine_builder.weights_format import DownloadFailed, weights_key
from tests.support.downloads import commit_of, scripted
from tests.support.kube import Kube, Resources, Tools, printed_rows

from .conftest import operator_writes_at_rest

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "qwen2_5_vl.yaml"
REPO = "Qwen/Qwen2.5-VL-3B-Instruct"
DOWNLOADS = "app.kubernetes.io/component=weights-download"


def qwen(name: str = "qwen2-5-vl", *, build: dict[str, Any] | None = None, **serving: Any) -> dict[str, Any]:
    """The example, named `name`, whose download ends as `build` scripts it (default: kwok's fake download
    stage reports success, with the commit `commit_of` makes up for a branch)."""
    document: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    document["metadata"]["name"] = name
    if build is not None:
        document["spec"]["build"] = build
    document["spec"]["serving"].update(serving)
    return document


def download_jobs(kube: Kube, namespace: str) -> list[Any]:
    return list(kube.batch.list_namespaced_job(namespace, label_selector=DOWNLOADS).items)


def condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in body["status"]["conditions"] if c["type"] == kind)


def test_a_resource_downloads_once_then_serves_with_the_resolved_commit(
    kube: Kube, resources: Resources, namespace: str, tools: Tools
) -> None:
    resources.apply(qwen())
    ready = resources.wait_phase("qwen2-5-vl", "Ready")
    status = ready["status"]
    commit, download_key = commit_of(REPO, "main"), weights_key(REPO, "main")
    snapshot = weights_key(REPO, commit)
    assert status["weights"] == {
        "repo": REPO,
        "revision": "main",
        "commit": commit,
        "downloadKey": download_key,
        "snapshotKey": snapshot,
        "claim": "mmd-engine-cache",
        "path": f"/engines/{snapshot}/Qwen2.5-VL-3B-Instruct",
        "job": f"download-{download_key}",
        "source": "Downloaded",
    }
    assert "engine" not in status and "derived" not in status
    weights = condition(ready, "WeightsReady")
    assert weights["reason"] == "Downloaded"
    assert weights["message"].startswith(f"{REPO}@main is commit {commit}: snapshot {snapshot} downloaded")
    assert condition(ready, "ServingConfigReady")["status"] == "True"
    assert status["endpoints"] == {
        "http": f"http://qwen2-5-vl.{namespace}.svc:8000/v1",
        "metrics": f"http://qwen2-5-vl.{namespace}.svc:8002/prometheus/metrics",
    }
    # The index records the snapshot and the resolution of main.
    index = kube.core.read_namespaced_config_map("mmd-engine-cache-index", namespace).data
    assert json.loads(index[f"revision.{download_key}"])["commit"] == commit
    assert json.loads(index[f"snapshot.{snapshot}"])["commit"] == commit
    # The download Job: no GPU, the plan as its argument, no token.
    (job,) = download_jobs(kube, namespace)
    container = job.spec.template.spec.containers[0]
    assert container.args[:2] == ["download", "--plan-json"] and "--token-file" not in container.args
    assert container.resources is None or not (container.resources.limits or {}).get("nvidia.com/gpu")
    # The pod runs trtllm-serve on the snapshot of the commit, with the generated config.
    deployment = kube.apps.read_namespaced_deployment("qwen2-5-vl", namespace)
    server = deployment.spec.template.spec.containers[0]
    assert server.command == [
        "trtllm-serve", f"/engines/{snapshot}/Qwen2.5-VL-3B-Instruct", "--backend", "pytorch",
        "--host", "0.0.0.0", "--port", "8000", "--tp_size", "1", "--config", "/etc/trtllm-serve/config.yaml",
    ]  # fmt: skip
    assert server.readiness_probe.http_get.path == "/health"
    config = kube.core.read_namespaced_config_map(status["modelRepository"], namespace).data["config.yaml"]
    assert yaml.safe_load(config)["return_perf_metrics"] is True
    service = kube.core.read_namespaced_service("qwen2-5-vl", namespace)
    assert [(p.name, p.port, p.target_port) for p in service.spec.ports] == [
        ("http", 8000, "http"),
        ("metrics", 8002, "http"),
    ]
    policy = k8s.NetworkingV1Api(kube.core.api_client).read_namespaced_network_policy("qwen2-5-vl", namespace)
    assert policy.spec.policy_types == ["Egress"] and [p.port for p in policy.spec.egress[0].ports] == [
        53,
        53,
    ]
    wide = tools.run("kubectl", "get", "mmd", "qwen2-5-vl", "-n", namespace, "-o", "wide").stdout
    (row,) = printed_rows(wide)
    assert (row["RUNTIME"], row["COMMIT"], row["PHASE"], row["PROGRESS"]) == (
        "trtllm-serve",
        commit,
        "Ready",
        "",
    )


def test_two_resources_share_one_download_and_later_ones_hit_the_cache(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    resources.apply(qwen("first"))
    resources.apply(qwen("second"))
    resources.wait_phase("first", "Ready")
    resources.wait_phase("second", "Ready")
    (job,) = download_jobs(kube, namespace)
    assert sorted(ref.name for ref in job.metadata.owner_references) == ["first", "second"]

    # After the download: the recorded resolution serves main's commit without a Job, and so does the commit.
    late = qwen("late")
    pinned = qwen("pinned", build={"backoffLimit": 0})
    pinned["spec"]["model"]["source"]["huggingface"]["revision"] = commit_of(REPO, "main")
    for document in (late, pinned):
        resources.apply(document)
        hit = resources.wait_phase(document["metadata"]["name"], "Ready")["status"]["weights"]
        assert hit["source"] == "CacheHit" and hit["commit"] == commit_of(REPO, "main")
        assert hit["snapshotKey"] == weights_key(REPO, commit_of(REPO, "main"))
    assert [j.metadata.uid for j in download_jobs(kube, namespace)] == [job.metadata.uid]

    # Every user of the download key is an owner of its Job (the late one joined it); the commit's user has
    # another key and no Job.
    (job,) = download_jobs(kube, namespace)
    assert sorted(ref.name for ref in job.metadata.owner_references) == ["first", "late", "second"]
    for name in ("first", "second", "late"):
        resources.delete(name)
    kube.wait_for("the download Job to go with its last user", lambda: download_jobs(kube, namespace) == [])


@pytest.mark.parametrize(
    ("report", "exit_code", "says"),
    [
        (
            DownloadFailed(
                key=weights_key(REPO, "main"),
                step="resolve",
                exit_code=1,
                reason=f"revision main does not exist in {REPO} on https://huggingface.co: name a branch, "
                "tag or commit of the repository in spec.model.source.huggingface.revision",
            ),
            None,
            "step resolve failed (exit code 1): revision main does not exist",
        ),
        (None, 137, "the download exited (exit code 137), killed by SIGKILL (out of memory or evicted)"),
    ],
    ids=["revision-not-found", "killed"],
)
def test_a_failed_download_is_reported_and_recovers_once_the_spec_changes(
    kube: Kube,
    resources: Resources,
    namespace: str,
    report: DownloadFailed | None,
    exit_code: int | None,
    says: str,
) -> None:
    resources.apply(qwen(build=scripted(report, exit_code=exit_code)))
    failed = resources.wait_phase("qwen2-5-vl", "Failed")
    weights = condition(failed, "WeightsReady")
    assert weights["reason"] == "DownloadFailed" and says in weights["message"]
    ready = condition(failed, "Ready")
    assert ready["reason"] == "DownloadFailed"
    assert ready["message"].endswith("and a change of the spec (or deleting the Job) downloads again.")
    assert kube.apps.list_namespaced_deployment(namespace).items == []

    resources.apply(qwen())
    ready_now = resources.wait_phase("qwen2-5-vl", "Ready")
    assert ready_now["status"]["weights"]["source"] == "Downloaded"
    kube.wait_for(
        "one Job, the new one, completed",
        lambda: [j.status.succeeded for j in download_jobs(kube, namespace)] == [1],
    )


def test_a_serving_change_rolls_the_pods_without_a_download(
    kube: Kube, resources: Resources, namespace: str
) -> None:
    resources.apply(qwen())
    before = resources.wait_phase("qwen2-5-vl", "Ready")["status"]
    (job,) = download_jobs(kube, namespace)
    resources.apply(qwen(kvCacheFreeGpuMemFraction=0.7))
    after = resources.wait_phase("qwen2-5-vl", "Ready")["status"]
    assert after["modelRepository"] != before["modelRepository"]
    assert after["weights"]["snapshotKey"] == before["weights"]["snapshotKey"]
    assert [j.metadata.uid for j in download_jobs(kube, namespace)] == [job.metadata.uid]
    config = kube.core.read_namespaced_config_map(after["modelRepository"], namespace).data["config.yaml"]
    assert yaml.safe_load(config)["kv_cache_config"]["free_gpu_memory_fraction"] == 0.7


def test_a_volume_source_downloads_nothing(kube: Kube, resources: Resources, namespace: str) -> None:
    kube.core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "models"},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "100Gi"}}},
        },
    )
    document = qwen("from-volume", build={"backoffLimit": 0})
    document["spec"]["model"]["source"] = {"pvc": {"claimName": "models", "path": "/qwen2.5-vl-3b"}}
    resources.apply(document)
    ready = resources.wait_phase("from-volume", "Ready")
    assert ready["status"]["weights"] == {
        "claim": "models",
        "path": "/model-source/qwen2.5-vl-3b",
        "source": "Volume",
    }
    assert download_jobs(kube, namespace) == []
    claims = [c.metadata.name for c in kube.core.list_namespaced_persistent_volume_claim(namespace).items]
    assert claims == ["models"]  # no engine-cache claim either
    server = kube.apps.read_namespaced_deployment("from-volume", namespace).spec.template.spec.containers[0]
    assert server.command[1] == "/model-source/qwen2.5-vl-3b"


def test_refusals_at_admission_and_by_the_operator(
    resources: Resources, namespace: str, tools: Tools, tmp_path: Path
) -> None:
    video = qwen("gemma")
    video["spec"]["model"] = {"type": "gemma3", "source": {"huggingface": {"repo": "google/gemma-3-4b-it"}}}
    video["spec"]["serving"] = {"modalities": ["image", "video"]}
    path = tmp_path / "gemma.yaml"
    path.write_text(yaml.safe_dump(video))
    refused = tools.run("kubectl", "apply", "--server-side", "-n", namespace, "-f", str(path), check=False)
    assert refused.returncode != 0
    assert "spec.serving.modalities: Forbidden: serving.modalities names video" in refused.stderr
    assert "model.type is gemma3 on runtime trtllm-serve" in refused.stderr

    invalid = qwen("labelled")
    invalid["spec"]["serving"]["pod"] = {"labels": {"team": "x" * 70}}
    resources.apply(invalid)
    failed = resources.wait_phase("labelled", "Failed")
    assert condition(failed, "Ready")["reason"] == "InvalidSpec"
    assert condition(failed, "WeightsReady")["reason"] == "InvalidSpec"
    assert "spec.serving.pod.labels[team]" in condition(failed, "Validated")["message"]


def test_the_token_is_a_mounted_file_of_the_download_and_nowhere_else(
    kube: Kube, resources: Resources, namespace: str, api_client: Any
) -> None:
    token = "hf_cluster_test_token_7d1e"
    kube.core.create_namespaced_secret(
        namespace, {"metadata": {"name": "hf"}, "stringData": {"token": token}}
    )
    document = qwen("gated")
    document["spec"]["model"]["source"]["huggingface"]["tokenSecretRef"] = {"name": "hf", "key": "token"}
    resources.apply(document)
    ready = resources.wait_phase("gated", "Ready")
    (job,) = download_jobs(kube, namespace)
    pod = job.spec.template.spec
    assert pod.containers[0].args[-2:] == ["--token-file", "/var/run/secrets/huggingface/token"]
    assert [v.secret.secret_name for v in pod.volumes if v.secret] == ["hf"]
    serialized = [
        api_client.sanitize_for_serialization(item)
        for item in (
            *kube.batch.list_namespaced_job(namespace).items,
            *kube.core.list_namespaced_pod(namespace).items,
            *kube.core.list_namespaced_config_map(namespace).items,
            *kube.core.list_namespaced_event(namespace).items,
            *kube.apps.list_namespaced_deployment(namespace).items,
        )
    ]
    assert token not in json.dumps(serialized) and token not in json.dumps(ready)


def test_nothing_is_written_at_rest(resources: Resources, namespace: str, local_cluster: Any) -> None:
    resources.apply(qwen())
    resources.wait_phase("qwen2-5-vl", "Ready")
    writes = operator_writes_at_rest(local_cluster.audit_log, namespace, 20)
    assert writes == [], json.dumps(writes, indent=1)[:3000]
