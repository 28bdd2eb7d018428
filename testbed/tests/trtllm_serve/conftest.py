"""The trtllm-serve tier: the double of TensorRT-LLM's `trtllm-serve` as a real subprocess on loopback.

Every test here is marked `trtllm_serve`. Servers are started once per session on free 127.0.0.1 ports from
model directories made here (a config.json naming the architecture; nothing is downloaded) and stopped at the
end. Requests are bounded: each call has a timeout and no test loops without a limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mmd_testbed.triton import media
from testbed.tests.trtllm_serve.double import Double, model_dir, start
from tests.support.file_host import serving_directory

HERE = Path(__file__).parent
URL_ENV = {"MMD_DOUBLE_URL_ALLOW_HOSTS": "127.0.0.1"}
# What an operator-generated --config sets (issue 22): the double must take it.
OPERATOR_LIKE_CONFIG = """\
kv_cache_config:
  free_gpu_memory_fraction: 0.85
  enable_block_reuse: false
max_batch_size: 8
max_num_tokens: 8192
enable_chunked_prefill: true
return_perf_metrics: true
"""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.trtllm_serve)


@pytest.fixture(scope="session")
def models_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def qwen_dir(models_root: Path) -> Path:
    return model_dir(
        models_root, "Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", "Qwen2.5-VL-3B-Instruct"
    )


@pytest.fixture(scope="session")
def qwen(qwen_dir: Path, logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Double]:
    """Qwen2.5-VL (image, video), the operator-like --config: Prometheus metrics on, URLs from loopback."""
    config = tmp_path_factory.mktemp("config") / "extra-llm-api-config.yml"
    config.write_text(OPERATOR_LIKE_CONFIG)
    double = start(qwen_dir, logs, ["--tp_size", "1", "--config", str(config)], env=URL_ENV)
    yield double
    double.stop()


@pytest.fixture(scope="session")
def gemma(models_root: Path, logs: Path) -> Iterator[Double]:
    """Gemma 3 (image only), no --config: no Prometheus metrics, no URLs fetched."""
    double = start(model_dir(models_root, "Gemma3ForConditionalGeneration", "gemma3"), logs)
    yield double
    double.stop()


@pytest.fixture(scope="session")
def phi4mm(models_root: Path, logs: Path) -> Iterator[Double]:
    """Phi-4-multimodal (image, audio): the one audio model."""
    double = start(model_dir(models_root, "Phi4MMForCausalLM", "phi4mm"), logs, env=URL_ENV)
    yield double
    double.stop()


@pytest.fixture(scope="session")
def media_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An image, a video (animated GIF), a WAV, served by `file_host` and read by the tests."""
    root = tmp_path_factory.mktemp("media")
    media.image(root / "cat.png", size=(64, 48), fmt="PNG")
    media.gif(root / "clip.gif", count=4)
    media.speech(root / "hello.wav", "hello")
    (root / "garbage.png").write_bytes(b"this is not an image")
    return root


@pytest.fixture(scope="session")
def file_host(media_dir: Path) -> Iterator[str]:
    """The loopback base URL of `media_dir`."""
    with serving_directory(media_dir) as base:
        yield base
