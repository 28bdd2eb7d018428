"""A resource moved to the engine path's last release on real pods, while its old engine serves.

The stand-in images are one per release (the test bed's `release-cpu` stage): the 1.2.1 builder records
1.2.1 in its engines and accepts only 1.2.1 plans, the 1.2.1 serving doubles stand for 1.2.1's backend
(they refuse a 0.19.0 engine, and take `min_tokens` and `seed`). The operator names the 1.2.1 images by
their tag from the chart's 0.19.0 ones.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.kube import Kube, Resources
from tests.support.pods import example, llava_requests, mmctl_infer, service_ip, serving_pods, wait_until

pytestmark = pytest.mark.pods
# Bounds of the request loop that watches the move (requests only to this cluster's Service).
MAX_REQUESTS = 120
MAX_SECONDS = 300


def _engine(resources: Resources) -> dict[str, Any]:
    status = resources.get("llava").get("status") or {}
    engine: dict[str, Any] = status.get("engine") or {}
    return engine


def _build_images(kube: Kube, namespace: str) -> set[str]:
    jobs = kube.batch.list_namespaced_job(namespace).items
    return {container.image for job in jobs for container in job.spec.template.spec.containers}


@pytest.mark.timeout(900)
def test_a_resource_moves_to_the_last_release_while_its_old_engine_keeps_answering(
    resources: Resources, kube: Kube, namespace: str, picture: Path
) -> None:
    resources.apply(example("llava"))
    resources.wait_phase("llava", "Ready", timeout=300)
    before = _engine(resources)
    assert before["tensorrtLlmVersion"] == "0.19.0"
    old_pods = {pod.metadata.name for pod in serving_pods(kube, namespace, "llava")}
    (old_image,) = {pod.spec.containers[0].image for pod in serving_pods(kube, namespace, "llava")}
    assert old_image.endswith("-trtllm0.19.0")
    url = f"grpc://{service_ip(kube, namespace, 'llava')}:8001"
    build_images: set[str] = set()

    def moved_over() -> dict[str, Any]:
        build_images.update(_build_images(kube, namespace))  # a finished Job may be gone by the end
        engine = _engine(resources)
        pods = serving_pods(kube, namespace, "llava")
        done = (
            engine.get("tensorrtLlmVersion") == "1.2.1"
            and engine.get("cacheKey") != before["cacheKey"]
            and pods
            and not old_pods & {pod.metadata.name for pod in pods}
            and resources.get("llava")["status"].get("phase") == "Ready"
        )
        return engine if done else {}

    # No seed and no minimum length: the request both releases take, so the move may lose none.
    with llava_requests(url, picture, max_requests=MAX_REQUESTS, max_seconds=MAX_SECONDS, pause=1) as results:
        wait_until("a few answers before the move", lambda: len(results) >= 2, timeout=60)
        moved = time.monotonic()
        resources.apply(example("llava", engine={"tensorrtLlmVersion": "1.2.1"}))
        try:
            after = wait_until("the resource to serve 1.2.1's engine", moved_over, timeout=420)
        except AssertionError as late:
            pods = [(pod.metadata.name, pod.status.phase) for pod in serving_pods(kube, namespace, "llava")]
            status = resources.get("llava").get("status")
            raise AssertionError(f"{late}; status {status}; pods {pods}") from None
        seconds = time.monotonic() - moved
        time.sleep(3)
    assert after["source"] == "Built"
    assert any(image.endswith("-trtllm1.2.1") for image in build_images), build_images
    images = {pod.spec.containers[0].image for pod in serving_pods(kube, namespace, "llava")}
    assert images == {old_image.removesuffix("-trtllm0.19.0") + "-trtllm1.2.1"}
    during = [result for result in results if result[0] >= moved]
    failed = [result for result in results if result[1] != 0]
    assert len(during) >= 3, f"only {len(during)} requests during the move"
    assert not failed, f"{len(failed)} of {len(results)} requests failed during the move: {failed[:3]}"
    # 1.2.1's names, which `mmctl infer` picks from what the server declares.
    seeded = mmctl_infer(
        url, "--model-type", "llava", "--image", str(picture), "--seed", "7", "--timeout", "20"
    )
    assert seeded.returncode == 0, seeded.stderr
    print(f"\nmove to TensorRT-LLM 1.2.1: {seconds:.0f} s, {len(during)} requests during it, none failed")
