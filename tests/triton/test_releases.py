"""The engine path's releases on the real tritonserver: what a 1.2.1 repository takes and refuses.

A resource with `engine.tensorrtLlmVersion: 1.2.1` renders 1.2.1's tensor names (`min_tokens`, `seed`)
and its doubles stand for 1.2.1's backend: Triton itself refuses the 0.19.0 names as undeclared inputs,
the backend double checks `min_tokens` as the executor does, and an engine recorded by another release's
trtllm-build does not load, in TensorRT's words.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tritonclient.utils import InferenceServerException

from engine_builder import versions
from mmctl.triton.requests import Sampling, Tensor, TextRequest, text_request
from mmd_testbed.triton import media
from mmd_testbed.triton.localserver import ServerFailedError
from mmd_testbed.triton.serving import Served
from tests.triton.conftest import Start
from tests.triton.reference import grpc_results
from tests.triton.serving import load_example, replaced, scalar

LAST = {"tensorrtLlmVersion": "1.2.1"}


@pytest.fixture(scope="module")
def llava_last(start: Start) -> Iterator[Served]:
    with start("llava-1.2.1", load_example("llava", engine=LAST)) as served:
        yield served


def _request(served: Served, tmp_path: Path, seed: int | None = None) -> list[Tensor]:
    picture = media.image(tmp_path / "picture.jpg")
    request = TextRequest(
        text="what is this",
        images=[str(picture)],
        max_tokens=4,
        sampling=Sampling(seed=seed),
        seed_input="seed",
    )
    return replaced(text_request(served.knowledge, request), drop=["prompt_table_extra_id"])


def _answer(served: Served, model: str, tensors: list[Tensor]) -> str:
    results = grpc_results(served, model, tensors, ["text_output"])
    return "".join(item.decode() for result in results for item in result.as_numpy("text_output"))


def test_a_last_release_repository_takes_min_tokens_and_seed_and_refuses_the_old_names(
    llava_last: Served, tmp_path: Path
) -> None:
    tensors = _request(llava_last, tmp_path, seed=11)
    for model in ("ensemble", "tensorrt_llm_bls"):
        assert "llm:" in _answer(llava_last, model, tensors), model
        assert "llm:" in _answer(llava_last, model, replaced(tensors, scalar("min_tokens", 2, "INT32")))
        # The executor's own check, reached through 1.2.1's name.
        with pytest.raises(InferenceServerException, match=re.escape("minTokens.value() >= 0")):
            grpc_results(
                llava_last, model, replaced(tensors, scalar("min_tokens", -1, "INT32")), ["text_output"]
            )
        for old, datatype in (("min_length", "INT32"), ("random_seed", "UINT64")):
            with pytest.raises(InferenceServerException, match=f"unexpected inference input '{old}'"):
                grpc_results(llava_last, model, replaced(tensors, scalar(old, 1, datatype)), ["text_output"])


def test_an_engine_built_by_another_release_does_not_load(start: Start) -> None:
    last = load_example("llava", engine=LAST)
    # The 0.19.0 builder's engines in the 1.2.1 serving image: the cache entry a mismatched image would read.
    plan = dataclasses.replace(last, build=load_example("llava").build)
    assert plan.build.trtllm_version == "0.19.0" and plan.settings.release.tensorrt_llm == "1.2.1"
    with pytest.raises(ServerFailedError) as failed, start("llava-engine-of-0.19.0", plan):
        pass
    log = re.search(r"log (\S+server\.log):", str(failed.value))
    assert log, failed.value
    expected = (
        f"expecting library version {versions.ENGINE_RELEASES['1.2.1'].tensorrt} got "
        f"{versions.ENGINE_RELEASES['0.19.0'].tensorrt}, please rebuild."
    )
    assert expected in Path(log.group(1)).read_text()
