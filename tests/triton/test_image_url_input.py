"""`serving.imageUrlInput` on a real tritonserver: off (the default), no model of the repository declares
an image URL input and Triton itself refuses a request that carries one, before any model code could
fetch it; on, the input is declared end to end and the (double of the) preprocessing fetches the URL.

llava_onevision stands for the three types that can load URLs (mllama, qwen2_vl): it has both the
ensemble and the BLS entry point. The unit tier checks the rendered configs of all three."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from mmctl.main import main
from mmctl.triton.client import ServerError
from mmctl.triton.requests import Tensor, TextRequest, text_request
from mmd_testbed.triton import media
from mmd_testbed.triton.doubles import codec
from mmd_testbed.triton.localserver import TritonInstall
from mmd_testbed.triton.serving import Served, serve
from tests.triton.serving import load_example

NAME = "llava_onevision"


def _serve(
    image_url_input: bool, install: TritonInstall, factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Iterator[Served]:
    plan = load_example(NAME, {"imageUrlInput": True} if image_url_input else None)
    assert plan.settings.spec.serving.image_url_input is image_url_input
    label = f"{NAME}-urls-{'on' if image_url_input else 'off'}"
    with serve(label, plan, install, factory.mktemp("urls"), say) as server:
        yield server


@pytest.fixture(scope="module")
def urls_off(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Iterator[Served]:
    yield from _serve(False, triton_install, tmp_path_factory, say)


@pytest.fixture(scope="module")
def urls_on(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Iterator[Served]:
    yield from _serve(True, triton_install, tmp_path_factory, say)


def _url_request(
    url: str, text_input: str = "text_input", url_input: str = "image_url_input"
) -> list[Tensor]:
    return [
        Tensor(text_input, np.array([[b"what"]], dtype=object), "BYTES"),
        Tensor(url_input, np.array([[url.encode()]], dtype=object), "BYTES"),
    ]


def _declared(served: Served) -> dict[str, set[str]]:
    with served.client("grpc") as client:
        return {
            model: set(client.input_names(model)) & {"image_url_input", "IMAGE_URL"}
            for model in ("ensemble", "preprocessing", "tensorrt_llm_bls")
        }


def _send(served: Served, protocol: str, model: str, tensors: list[Tensor]) -> list[str]:
    """Straight to the server, past the client's own check of declared inputs."""
    with served.client(protocol) as client:
        return [r.text("text_output") for r in client.responses(model, tensors, ["text_output"])]


def test_off_no_model_declares_a_url_input(urls_off: Served) -> None:
    assert _declared(urls_off) == {"ensemble": set(), "preprocessing": set(), "tensorrt_llm_bls": set()}


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_off_triton_refuses_a_request_with_an_image_url(
    urls_off: Served, image_host: tuple[str, Path], protocol: str, model: str
) -> None:
    base, root = image_host
    picture = media.image(root / "refused.jpg", (20, 10), seed=1)
    tensors = [
        *_url_request(f"{base}/{picture.name}"),
        Tensor("max_tokens", np.array([[4]], np.int32), "INT32"),
    ]
    with pytest.raises(
        ServerError, match=rf"unexpected inference input 'image_url_input' for model '{model}'"
    ):
        _send(urls_off, protocol, model, tensors)


def test_off_preprocessing_called_directly_refuses_image_url(urls_off: Served) -> None:
    # Every model of the repository is reachable on its own, not only through the ensemble.
    tensors = [
        *_url_request("http://127.0.0.1:1/x.jpg", text_input="QUERY", url_input="IMAGE_URL"),
        Tensor("REQUEST_OUTPUT_LEN", np.array([[4]], np.int32), "INT32"),
    ]
    with (
        urls_off.client("grpc") as client,
        pytest.raises(ServerError, match="unexpected inference input 'IMAGE_URL' for model 'preprocessing'"),
    ):
        list(client.responses("preprocessing", tensors, ["INPUT_ID"]))


def test_off_mmctl_infer_fetches_the_url_itself_and_sends_pixels(
    urls_off: Served, capsys: pytest.CaptureFixture[str], image_host: tuple[str, Path]
) -> None:
    base, root = image_host
    picture = media.image(root / "fetched.jpg", (24, 16), seed=2)
    code = main(
        ["infer", "--url", urls_off.url("grpc"), "--text", "what", "--image", f"{base}/{picture.name}"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    seen = codec.parse_digest(out.strip())
    assert "image_url" not in seen["pre"]
    assert seen["pre"]["image_bytes"].startswith("1x16x24x3#")  # one image, H x W x RGB, per row


def test_on_every_entry_point_declares_the_url_input(urls_on: Served) -> None:
    assert _declared(urls_on) == {
        "ensemble": {"image_url_input"},
        "preprocessing": {"IMAGE_URL"},
        "tensorrt_llm_bls": {"image_url_input"},
    }


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_on_the_server_fetches_the_url(urls_on: Served, image_host: tuple[str, Path], model: str) -> None:
    base, root = image_host
    picture = media.image(root / "allowed.jpg", (20, 10), seed=3)
    request = TextRequest(text="what", images=[f"{base}/{picture.name}"], max_tokens=4)
    tensors = text_request(urls_on.knowledge, request)
    assert [t.name for t in tensors if t.name.startswith("image")] == ["image_url_input"]
    seen = codec.parse_digest("".join(_send(urls_on, "grpc", model, tensors)))
    assert seen["pre"]["image_url"] == f"http#{codec.short_hash(picture.read_bytes())}:20x10"
    assert seen["llm"]["request_output_len"] == "4"
