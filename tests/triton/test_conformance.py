"""Every example's rendered repository in a real tritonserver: loads with strict readiness, and carries
requests through the ensemble and the BLS entry point over gRPC and HTTP, with each image input the type
accepts. Assertions read the doubles' digests: what reached preprocessing, the encoder and the LLM."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from mmctl.triton.client import ServerError
from mmctl.triton.requests import (
    IMAGE_GEOMETRY,
    RequestError,
    Sampling,
    Tensor,
    TextRequest,
    audio_request,
    load_audio,
    text_request,
)
from mmd_operator.knowledge import ImageInput, ModelKnowledge, ModelType, RepositoryLayout
from mmd_operator.plan.repository_check import check_ensemble, parse_repository
from mmd_testbed.triton import media
from mmd_testbed.triton.doubles import codec
from mmd_testbed.triton.doubles.repository import contract_of
from mmd_testbed.triton.localserver import TritonInstall
from mmd_testbed.triton.serving import Served, serve
from tests.triton.conftest import EXAMPLE_NAMES
from tests.triton.reference import grpc_results
from tests.triton.serving import load_example, load_example_with_urls


@pytest.fixture(scope="module", params=EXAMPLE_NAMES)
def served(
    request: pytest.FixtureRequest,
    triton_install: TritonInstall,
    tmp_path_factory: pytest.TempPathFactory,
    say: Callable[[str], None],
) -> Iterator[Served]:
    name = request.param
    # Served with every input the type can take, URLs included; test_image_url_input.py serves the
    # examples' own default, which refuses URLs.
    plan = load_example_with_urls(name)
    with serve(name, plan, triton_install, tmp_path_factory.mktemp("served"), say) as server:
        yield server


def ask(served: Served, protocol: str, tensors: list[Tensor], model: str = "ensemble") -> list[str]:
    """Send one request; return the text of every response."""
    output = "TRANSCRIPTS" if model == "whisper_bls" else "text_output"
    with served.client(protocol) as client:
        client.check_inputs(model, tensors, served.knowledge.model_type)
        return [response.text(output) for response in client.responses(model, tensors, [output])]


def digest(
    served: Served, protocol: str, tensors: list[Tensor], model: str = "ensemble"
) -> dict[str, dict[str, str]]:
    texts = ask(served, protocol, tensors, model)
    return codec.parse_digest("".join(texts))


def image_request(served: Served, tmp_path: Path, **options: object) -> tuple[list[Tensor], Path]:
    """The type's natural request with one generated image: pixels for tensor types, bytes otherwise."""
    picture = media.image(tmp_path / "picture.jpg")
    request = TextRequest(text="what is this", images=[str(picture)], max_tokens=8, **options)  # type: ignore[arg-type]
    return text_request(served.knowledge, request), picture


def pixel_values_shape(knowledge: ModelKnowledge) -> str:
    """How the (double of the) real preprocessing lays out one image's PIXEL_VALUES, as the encoder's
    trace starts: mllama pads every image to 4 tiles, Qwen2-VL sends flattened patches."""
    if knowledge.model_type is ModelType.MLLAMA:
        return "FP16[1,4,3,"
    if knowledge.model_type is ModelType.QWEN2_VL:
        return "FP16[1,1,1,"
    return "FP16[1,1,3,"


def assert_image_arrived(served: Served, seen: dict[str, dict[str, str]], picture: Path) -> None:
    knowledge = served.knowledge
    assert seen["type"]["name"] == knowledge.model_type.value
    assert seen["pre"]["text"].endswith("what is this") or "what is this" in seen["pre"]["text"]
    assert seen["pre"]["max_tokens"] == "8"
    if ImageInput.TENSOR in knowledge.image_inputs:
        size = IMAGE_GEOMETRY[knowledge.model_type].size
        shape = (
            f"[1,3,{size},{size}]"
            if knowledge.layout is RepositoryLayout.XCOMPOSER2
            else f"[1,1,3,{size},{size}]"
        )
        assert seen["enc"]["IMAGE"].startswith(f"FP16{shape}#")
    else:
        assert seen["pre"]["image_bytes"].startswith("1x")
        assert seen["enc"]["pixel_values"].startswith(pixel_values_shape(knowledge))
    llm = seen["llm"]
    assert llm["request_output_len"] == "8"
    if knowledge.uses_prompt_table:
        assert llm["fake_ids"] == "1"
        assert llm["prompt_embedding_table"].startswith("FP16[1,")
    if knowledge.encoder_decoder:
        assert llm["encoder_input_features"].startswith("BF16[1,")
        assert llm["skip_cross_attn_blocks"] == "0"
    if knowledge.end_id is not None:
        assert llm["end_id"] == str(knowledge.end_id)


def _served_model_configs(served: Served) -> dict[str, object]:
    with served.client("grpc") as client:
        names = client.model_names()
        return {
            name: json_format.ParseDict(
                client.model_config(name), model_config_pb2.ModelConfig(), ignore_unknown_fields=True
            )
            for name in names
        }


def test_repository_loads_with_strict_readiness(served: Served) -> None:
    with served.client("http") as client:
        names = client.model_names()
        assert names == sorted(served.configs)
        for name in names:
            client.check_ready(name)
    served_configs = _served_model_configs(served)
    rendered = parse_repository(served.configs)
    for name, config in served_configs.items():
        # The server runs the rendered contract; only tensorrt_llm's backend differs (the GPU double).
        # Triton marks an ensemble decoupled itself when a step is.
        served_contract, rendered_contract = contract_of(config), contract_of(rendered[name])
        if rendered[name].platform == "ensemble":
            served_contract.pop("decoupled")
            rendered_contract.pop("decoupled")
        assert served_contract == rendered_contract, name
        expected_backend = "python" if name == "tensorrt_llm" else rendered[name].backend
        assert config.backend == expected_backend


def test_ensemble_steps_agree_on_every_tensor(served: Served) -> None:
    models = _served_model_configs(served)
    ensembles = [name for name, config in models.items() if config.platform == "ensemble"]  # type: ignore[attr-defined]
    assert ensembles or served.whisper
    for name in ensembles:
        assert check_ensemble(models, name) == []


def test_grpc_request(served: Served, tmp_path: Path) -> None:
    if served.whisper:
        wav = media.speech(tmp_path / "hello.wav", "hello world")
        texts = ask(served, "grpc", audio_request(served.knowledge, load_audio(str(wav))), "whisper_bls")
        assert texts[-1] == "hello world"
        return
    tensors, picture = image_request(served, tmp_path)
    seen = digest(served, "grpc", tensors)
    assert_image_arrived(served, seen, picture)


def test_http_request(served: Served, tmp_path: Path, image_host: tuple[str, Path]) -> None:
    knowledge = served.knowledge
    if served.whisper:
        wav = media.speech(tmp_path / "hi.wav", "hi there")
        tensors = audio_request(knowledge, load_audio(str(wav)))
        if served.decoupled:
            with pytest.raises(ServerError, match="generate endpoint carries no WAV tensor"):
                ask(served, "http", tensors, "whisper_bls")
        else:
            assert ask(served, "http", tensors, "whisper_bls")[-1] == "hi there"
        return
    if ImageInput.URL in knowledge.image_inputs:
        base, root = image_host
        picture = media.image(root / f"{served.name}.jpg", (40, 30), seed=3)
        request = TextRequest(text="where", images=[f"{base}/{picture.name}"], max_tokens=5)
        seen = digest(served, "http", text_request(knowledge, request))
        assert seen["pre"]["image_url"] == f"http#{codec.short_hash(picture.read_bytes())}:40x30"
        assert seen["enc"]["pixel_values"].startswith(pixel_values_shape(knowledge))
        assert seen["llm"]["request_output_len"] == "5"
        return
    tensors, picture = image_request(served, tmp_path)
    if not served.decoupled:
        assert_image_arrived(served, digest(served, "http", tensors), picture)
        return
    # Decoupled: HTTP can only use the generate extension, which carries no image tensor. Text alone
    # does cross the ensemble, and is refused where the real models refuse it.
    with pytest.raises(ServerError, match="generate endpoint carries no image_input tensor"):
        ask(served, "http", tensors)
    text_only = [t for t in tensors if t.name != "image_input"]
    refusal = "There is no preprocessed image tensor to encode"
    if knowledge.layout is RepositoryLayout.XCOMPOSER2:
        # Its ensemble requires image_input; Triton's generate endpoint words that refusal poorly.
        refusal = "expects model to produce exactly 1 response"
    with pytest.raises(ServerError, match=refusal):
        ask(served, "http", text_only)


def test_bls_entry_point(served: Served, tmp_path: Path) -> None:
    if not served.knowledge.bls:
        # Not rendered where it cannot serve the type: Whisper's entry point is whisper_bls (tested above),
        # and InternLM-XComposer2's preprocessing needs the image the BLS cannot pass on.
        assert "tensorrt_llm_bls" not in served.configs
        with served.client("grpc") as client:
            assert "tensorrt_llm_bls" not in client.model_names()
        return
    tensors, picture = image_request(served, tmp_path)
    seen = digest(served, "grpc", tensors, "tensorrt_llm_bls")
    assert_image_arrived(served, seen, picture)


def test_rendered_transaction_policy_follows_streaming(served: Served) -> None:
    # Found by this tier: a template macro once shadowed the flag and every model rendered decoupled.
    assert served.decoupled == served.plan.settings.spec.serving.streaming


def test_input_the_type_does_not_declare_is_refused_by_the_server(served: Served) -> None:
    if served.whisper:
        return
    knowledge = served.knowledge
    foreign = "image_input" if ImageInput.TENSOR not in knowledge.image_inputs else "image_url_input"
    tensors = [
        Tensor("text_input", np.array([[b"x"]], dtype=object), "BYTES"),
        Tensor("max_tokens", np.array([[4]], dtype=np.int32), "INT32"),
        Tensor(foreign, np.array([[b"http://127.0.0.1:1/x.jpg"]], dtype=object), "BYTES"),
    ]
    with served.client("grpc") as client, pytest.raises(ServerError, match=f"does not accept {foreign}"):
        client.check_inputs("ensemble", tensors, knowledge.model_type)
    # Past the client's own check, Triton itself refuses the undeclared tensor.
    with served.client("grpc") as client, pytest.raises(ServerError, match=foreign):
        list(client.responses("ensemble", tensors, ["text_output"]))


def test_model_type_is_read_from_the_server(served: Served) -> None:
    knowledge = served.knowledge
    told_apart = (
        ModelType.LLAVA_ONEVISION,
        ModelType.MLLAMA,
        ModelType.QWEN2_VL,
        ModelType.INTERNLM_XCOMPOSER2,
    )
    with served.client("http") as client:
        if served.whisper:
            assert client.detect_model_type() is ModelType.WHISPER
        elif knowledge.model_type in told_apart:
            # mllama and qwen2_vl differ in prompt_table_extra_id, which only mllama's ensemble declares.
            assert client.detect_model_type() is knowledge.model_type
        else:
            with pytest.raises(ServerError, match="pass --model-type"):
                client.detect_model_type()


@contextlib.contextmanager
def streaming_deployment(
    served: Served, install: TritonInstall, workdir: Path, say: Callable[[str], None]
) -> Iterator[Served]:
    """`served` itself when it streams, else the same example rendered with serving.streaming on."""
    if served.decoupled:
        yield served
        return
    urls = {"imageUrlInput": True} if served.knowledge.image_urls else {}
    plan = load_example(served.name, {"streaming": True, **urls})
    with serve(f"{served.name}-streaming", plan, install, workdir, say) as streaming:
        yield streaming


def test_streaming(
    served: Served,
    triton_install: TritonInstall,
    tmp_path: Path,
    say: Callable[[str], None],
    image_host: tuple[str, Path],
) -> None:
    with streaming_deployment(served, triton_install, tmp_path, say) as server:
        knowledge = server.knowledge
        if server.whisper:
            wav = media.speech(tmp_path / "stream.wav", "streaming words")
            texts = ask(server, "grpc", audio_request(knowledge, load_audio(str(wav))), "whisper_bls")
            assert len(texts) >= 2 and texts[-1] == "streaming words"
            assert texts[1] == "streaming"  # each response is the transcript so far
            return
        tensors, _ = image_request(server, tmp_path, stream=True)
        for model in ("ensemble", "tensorrt_llm_bls"):
            if model not in server.configs:
                continue  # no BLS for this type (see test_bls_entry_point)
            texts = ask(server, "grpc", tensors, model)
            assert len(texts) >= 4 and all(texts), texts  # one response per digest segment
            seen = codec.parse_digest("".join(texts))
            assert seen["llm"]["streaming"] == "1"
            assert seen["pre"]["max_tokens"] == "8"
        if ImageInput.URL in knowledge.image_inputs:
            base, root = image_host
            picture = media.image(root / f"{server.name}-stream.jpg", (20, 10), seed=5)
            request = TextRequest(text="go", images=[f"{base}/{picture.name}"], max_tokens=3, stream=True)
            texts = ask(server, "http", text_request(knowledge, request))  # /generate_stream (SSE)
            assert len(texts) >= 4
            seen = codec.parse_digest("".join(texts))
            assert seen["pre"]["image_url"] == f"http#{codec.short_hash(picture.read_bytes())}:20x10"
            assert seen["llm"]["streaming"] == "1"
        else:
            with pytest.raises(ServerError, match="carries no image_input tensor"):
                ask(server, "http", tensors)


def test_several_images(served: Served, tmp_path: Path) -> None:
    knowledge = served.knowledge
    pictures = [str(media.image(tmp_path / f"p{i}.jpg", seed=i)) for i in range(2)]
    request = TextRequest(text="compare them", images=pictures, max_tokens=4)
    if served.whisper or not knowledge.multi_image:
        with pytest.raises(RequestError):
            text_request(knowledge, request)
        return
    tensors = text_request(knowledge, request)
    seen = digest(served, "grpc", tensors)
    size = IMAGE_GEOMETRY[knowledge.model_type].size
    assert seen["enc"]["IMAGE"].startswith(f"FP16[1,2,3,{size},{size}]#")
    assert seen["llm"]["fake_ids"] == "2"  # one prompt-table slot per <image> marker
    assert seen["pre"]["text"].count("<image>") == 2


def test_video_frames(served: Served, tmp_path: Path) -> None:
    knowledge = served.knowledge
    clip = media.frames(tmp_path / "clip", 8)
    request = TextRequest(text="what happens", video=str(clip), frames=4, max_tokens=4)
    if served.whisper or not knowledge.video:
        with pytest.raises(RequestError, match=r"does not accept video|transcribes audio"):
            text_request(knowledge, request)
        return
    seen = digest(served, "grpc", text_request(knowledge, request))
    assert seen["pre"]["video"].startswith("4x24x32x3#")
    assert seen["enc"]["is_video_input"] == "1"
    gif = media.gif(tmp_path / "clip.gif", 6)
    seen = digest(served, "grpc", text_request(knowledge, TextRequest(text="x", video=str(gif), frames=3)))
    assert seen["pre"]["video"].startswith("3x24x32x3#")


def test_image_as_data_url_and_raw_bytes(served: Served, tmp_path: Path) -> None:
    knowledge = served.knowledge
    if ImageInput.URL not in knowledge.image_inputs:
        return
    picture = media.image(tmp_path / "inline.jpg", (30, 20), seed=7)
    url = media.jpeg_data_url(picture)
    seen = digest(served, "grpc", text_request(knowledge, TextRequest(text="a", images=[url], max_tokens=2)))
    assert seen["pre"]["image_url"] == f"data#{codec.short_hash(picture.read_bytes())}:30x20"
    # A PNG data URL is not something the server decodes: the client re-encodes it as JPEG.
    png = media.image(tmp_path / "inline.png", (30, 20), seed=7, fmt="PNG")
    png_url = "data:image/png;base64," + media.base64.b64encode(png.read_bytes()).decode()
    seen = digest(
        served, "grpc", text_request(knowledge, TextRequest(text="a", images=[png_url], max_tokens=2))
    )
    assert seen["pre"]["image_url"].startswith("data#") and seen["pre"]["image_url"].endswith(":30x20")
    seen = digest(
        served, "grpc", text_request(knowledge, TextRequest(text="a", images=[str(png)], max_tokens=2))
    )
    size = "504x504" if knowledge.model_type is ModelType.QWEN2_VL else "20x30"
    assert seen["pre"]["image_bytes"].startswith(f"1x{size}x3#")


def _grpc_digest(served: Served, model: str, tensors: list[Tensor]) -> dict[str, dict[str, str]]:
    """What every response of one raw gRPC request to `model` says, read back from the doubles' digest."""
    texts = []
    for result in grpc_results(served, model, tensors, ["text_output"]):
        texts += [item.decode() for item in result.as_numpy("text_output")]
    return codec.parse_digest("".join(texts))


def test_prompt_table_extra_id(served: Served, tmp_path: Path) -> None:
    # The release's own client sends it whenever it is given, to the ensemble or the BLS, for any type.
    knowledge = served.knowledge
    extra = Tensor("prompt_table_extra_id", np.array([[42]], dtype=np.uint64), "UINT64")
    if served.whisper:
        # whisper_bls has no such input, in the reference either: Triton refuses it before any model runs
        # (all three of its inputs are required, so Triton counts them first).
        wav = media.speech(tmp_path / "extra.wav", "extra")
        tensors = [*audio_request(knowledge, load_audio(str(wav))), extra]
        refusal = (
            r"expected 3 inputs but got 4 inputs for model 'whisper_bls'\. "
            r"Got input\(s\) \[.*'prompt_table_extra_id'"
        )
        with pytest.raises(InferenceServerException, match=refusal):
            grpc_results(served, "whisper_bls", tensors, ["TRANSCRIPTS"])
        return
    plain, _ = image_request(served, tmp_path)
    if not knowledge.prompt_table_extra_id:
        # qwen2_vl (its preprocessing fails on the id) and internlm_xcomposer2 (no such input in the
        # fork's ensemble): Triton refuses it as an unknown input, mmctl says why.
        why = {
            ModelType.QWEN2_VL: "the v0.19.0 preprocessing builds no extra ids for qwen2_vl",
            ModelType.INTERNLM_XCOMPOSER2: "the reference ensemble of this type has no such input",
        }[knowledge.model_type]
        with pytest.raises(RequestError, match=f"does not accept prompt_table_extra_id: {why}"):
            image_request(served, tmp_path, prompt_table_extra_id=42)
        for model in _text_models(served):
            refusal = f"unexpected inference input 'prompt_table_extra_id' for model '{model}'"
            with pytest.raises(InferenceServerException, match=refusal):
                grpc_results(served, model, [*plain, extra], ["text_output"])
        return
    # Accepted as the reference accepts it, KV-cache reuse on or off (every example has it off).
    assert not served.plan.settings.spec.serving.kv_cache_reuse
    for model in _text_models(served):
        seen = _grpc_digest(served, model, [*plain, extra])
        assert seen["pre"]["prompt_table_extra_id"] == "42", model
        if knowledge.uses_prompt_table:
            assert seen["llm"]["prompt_table_extra_ids"] == "42", model  # on the fake prompt-table ids only
        else:
            # mllama: no prompt table, so the backend drops the extra ids: the LLM gets what it gets without.
            assert "prompt_table_extra_ids" not in seen["llm"], model
            assert set(seen["llm"]) == set(_grpc_digest(served, model, plain)["llm"]), model
    tensors, _ = image_request(served, tmp_path, prompt_table_extra_id=42)  # mmctl sends it too
    assert digest(served, "grpc", tensors)["pre"]["prompt_table_extra_id"] == "42"


@pytest.mark.parametrize("served", ["qwen2_vl"], indirect=True)
def test_qwen2_vl_preprocessing_fails_on_prompt_table_extra_id(served: Served, tmp_path: Path) -> None:
    # Why the ensemble does not declare it for qwen2_vl: called directly with the id, the v0.19.0
    # preprocessing reads a variable its qwen2_vl path never sets.
    picture = np.zeros((1, 1, 8, 8, 3), dtype=np.uint8)
    tensors = [
        Tensor("QUERY", np.array([[b"what"]], dtype=object), "BYTES"),
        Tensor("REQUEST_OUTPUT_LEN", np.array([[4]], dtype=np.int32), "INT32"),
        Tensor("IMAGE_BYTES", picture, "UINT8"),
    ]
    (answer,) = grpc_results(served, "preprocessing", tensors, ["INPUT_ID"])
    assert answer.as_numpy("INPUT_ID").shape[0] == 1
    extra = Tensor("PROMPT_TABLE_EXTRA_ID", np.array([[42]], dtype=np.uint64), "UINT64")
    refusal = "cannot access local variable 'prompt_table_extra_ids' where it is not associated with a value"
    with pytest.raises(InferenceServerException, match=refusal):
        grpc_results(served, "preprocessing", [*tensors, extra], ["INPUT_ID"])


@pytest.mark.parametrize("served", ["vila"], indirect=True)
def test_more_images_than_the_deployment_takes_are_refused(served: Served, tmp_path: Path) -> None:
    # vila.yaml builds for 4 images; preprocessing's max_num_images says so and it counts <image> markers.
    assert served.plan.settings.limits.max_num_images == 4
    pictures = [str(media.image(tmp_path / f"m{i}.jpg", seed=i)) for i in range(5)]
    four = text_request(served.knowledge, TextRequest(text="compare", images=pictures[:4], max_tokens=4))
    five = text_request(served.knowledge, TextRequest(text="compare", images=pictures, max_tokens=4))
    refusal = re.escape("The number of images in the request (5) exceeds the maximum allowed (4).")
    for model in _text_models(served):
        assert _grpc_digest(served, model, four)["llm"]["fake_ids"] == "4", model
        with pytest.raises(InferenceServerException, match=refusal):
            grpc_results(served, model, five, ["text_output"])


@pytest.mark.parametrize("served", ["llava_onevision", "qwen2_vl"], indirect=True)
def test_preprocessing_refuses_a_request_without_an_image(served: Served) -> None:
    # Both build the prompt from the processed image, so the real preprocessing fails before the encoder
    # could say there is nothing to encode; mmctl never sends such a request (it asks for --image).
    refusal = {
        "llava_onevision": "Image processing requires IMAGE_BYTES or IMAGE_URL to be provided",
        "qwen2_vl": "cannot access local variable 'qwen2vl_input_id_tensor' where it is not associated",
    }[served.name]
    tensors = [
        Tensor("text_input", np.array([[b"just text"]], dtype=object), "BYTES"),
        Tensor("max_tokens", np.array([[4]], dtype=np.int32), "INT32"),
    ]
    for model in _text_models(served):
        with pytest.raises(InferenceServerException, match=refusal):
            grpc_results(served, model, tensors, ["text_output"])


@pytest.mark.parametrize("served", ["llava", "llava-tp2-fp8"], indirect=True)
def test_bls_refuses_what_the_reference_bls_refuses(served: Served, tmp_path: Path) -> None:
    # The BLS checks its request before calling any model (unary and decoupled alike); no draft model is
    # rendered, so speculative decoding always ends in the last refusal.
    tensors, _ = image_request(served, tmp_path)
    stream = served.decoupled
    base = [t for t in tensors if t.name not in ("max_tokens", "stream")]

    def scalar(name: str, value: object, dtype: type, datatype: str) -> Tensor:
        return Tensor(name, np.array([[value]], dtype=dtype), datatype)

    cases = [
        ([scalar("max_tokens", 0, np.int32, "INT32")], "max_tokens must be a single value > 0"),
        ([scalar("num_draft_tokens", 2, np.int32, "INT32")], "'NoneType' object has no attribute 'any'"),
        (
            [scalar("num_draft_tokens", 2, np.int32, "INT32"), scalar("stream", True, bool, "BOOL")],
            "streaming is not supported with speculative decoding",
        ),
        (
            [
                scalar("num_draft_tokens", 2, np.int32, "INT32"),
                scalar("stream", False, bool, "BOOL"),
                scalar("return_context_logits", True, bool, "BOOL"),
            ],
            "context logits are not supported with speculative decoding",
        ),
        (
            [scalar("num_draft_tokens", 2, np.int32, "INT32"), scalar("stream", False, bool, "BOOL")],
            "cannot perform speculative decoding without draft model",
        ),
    ]
    for extra, refusal in cases:
        request = [*base, *extra]
        if not any(t.name == "max_tokens" for t in request):
            request.append(scalar("max_tokens", 4, np.int32, "INT32"))
        if not any(t.name == "stream" for t in request) and "'NoneType'" not in refusal:
            request.append(scalar("stream", stream, bool, "BOOL"))
        with pytest.raises(InferenceServerException, match=re.escape(refusal)):
            grpc_results(served, "tensorrt_llm_bls", request, ["text_output"])
    # With no draft tokens the same request is served: only a positive count asks to speculate.
    request = [
        *base,
        scalar("max_tokens", 4, np.int32, "INT32"),
        scalar("stream", stream, bool, "BOOL"),
        scalar("num_draft_tokens", 0, np.int32, "INT32"),
    ]
    assert _grpc_digest(served, "tensorrt_llm_bls", request)["llm"]["request_output_len"] == "4"


@pytest.mark.parametrize("served", ["whisper", "distil_whisper"], indirect=True)
def test_whisper_bls_refuses_several_utterances_in_one_request(served: Served, tmp_path: Path) -> None:
    wav = media.speech(tmp_path / "two.wav", "two")
    one = audio_request(served.knowledge, load_audio(str(wav)))
    two = [Tensor(t.name, np.concatenate([t.array, t.array]), t.datatype) for t in one]
    # Before its try: the assertion leaves execute, and Triton's Python backend words it.
    refusal = (
        r"Failed to process the request\(s\) for model 'whisper_bls_\d+(_\d+)?', message: "
        r"AssertionError: Only support batch size 1"
    )
    with pytest.raises(InferenceServerException, match=refusal):
        grpc_results(served, "whisper_bls", two, ["TRANSCRIPTS"])


def test_lora(served: Served, tmp_path: Path) -> None:
    knowledge = served.knowledge
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    np.save(adapter / "model.lora_weights.npy", np.arange(2 * 16, dtype=np.float16).reshape(2, 16))
    np.save(adapter / "model.lora_config.npy", np.array([[0, 0, 4], [1, 0, 4]], dtype=np.int32))
    if served.whisper or not knowledge.lora:
        if not served.whisper:
            with pytest.raises(RequestError, match="LoRA"):
                image_request(served, tmp_path, lora_task_id=3, lora_path=str(adapter))
        return
    tensors, _ = image_request(served, tmp_path, lora_task_id=3, lora_path=str(adapter))
    first = digest(served, "grpc", tensors)
    assert first["llm"]["lora_task_id"] == "3"
    assert first["llm"]["lora_weights"] == "FP16[1,2,16]"
    assert first["llm"]["lora_config"] == "INT32[1,2,3]"
    assert first["llm"]["lora"].startswith("loaded#")
    tensors, _ = image_request(served, tmp_path, lora_task_id=3)
    again = digest(served, "grpc", tensors)
    assert again["llm"]["lora"] == first["llm"]["lora"].replace("loaded", "cached")
    tensors, _ = image_request(served, tmp_path, lora_task_id=99)
    with pytest.raises(ServerError, match="LoRA task 99 not found in cache"):
        digest(served, "grpc", tensors)


def test_text_only_request(served: Served) -> None:
    knowledge = served.knowledge
    if served.whisper:
        return
    request = TextRequest(text="just text", max_tokens=3)
    if not knowledge.text_only_requests:
        with pytest.raises(RequestError, match="needs an image"):
            text_request(knowledge, request)
        return
    seen = digest(served, "grpc", text_request(knowledge, request))
    assert "enc" not in seen  # no image: the encoder only says to skip cross attention
    assert seen["llm"]["skip_cross_attn_blocks"] == "1"
    assert seen["pre"]["text"] == "<¦begin_of_text¦>just text"  # no <|image|> marker without an image


def _text_models(served: Served) -> list[str]:
    """The entry points that answer `text_output`: the ensemble and, where rendered, tensorrt_llm_bls."""
    return ["ensemble"] + (["tensorrt_llm_bls"] if "tensorrt_llm_bls" in served.configs else [])


def test_text_output_is_flat_with_one_string_per_beam(served: Served, tmp_path: Path) -> None:
    # The real postprocessing answers OUTPUT as a flat array, one string per (batch item x beam), and
    # tensorrt_llm_bls passes it on as text_output; whisper_bls answers TRANSCRIPTS as [1].
    if served.whisper:
        wav = media.speech(tmp_path / "flat.wav", "flat words")
        tensors = audio_request(served.knowledge, load_audio(str(wav)))
        results = grpc_results(served, "whisper_bls", tensors, ["TRANSCRIPTS"])
        for result in results:
            transcripts = result.as_numpy("TRANSCRIPTS")
            assert transcripts.shape == (1,) and isinstance(transcripts[0], bytes)
        assert results[-1].as_numpy("TRANSCRIPTS")[0].decode() == "flat words"
        return
    tensors, picture = image_request(served, tmp_path)
    for model in _text_models(served):
        texts = []
        for result in grpc_results(served, model, tensors, ["text_output"]):
            output = result.as_numpy("text_output")
            assert output.shape == (1,), (model, output.shape)  # one beam, not [batch, beam]
            texts += [item.decode() for item in output]  # as the backend's own clients read it
        assert_image_arrived(served, codec.parse_digest("".join(texts)), picture)


def test_a_beam_width_above_the_served_one_is_refused(served: Served, tmp_path: Path) -> None:
    # The executor serves widths up to tensorrt_llm's max_beam_width (1 in every example; whisper_bls sends
    # none, which means 1, so every transcription covers Whisper) and refuses a wider one when it steps.
    if served.whisper:
        assert 'key: "max_beam_width"\n  value { string_value: "1" }' in served.configs["tensorrt_llm"]
        return
    width_one, _ = image_request(served, tmp_path, sampling=Sampling(beam_width=1))
    too_wide, _ = image_request(served, tmp_path, sampling=Sampling(beam_width=2))
    for model in _text_models(served):
        (result, *_) = grpc_results(served, model, width_one, ["text_output"])
        assert codec.parse_digest(result.as_numpy("text_output")[0].decode())["llm"]["beam_width"] == "1"
        refusal = (
            r"Executor failed process requestId \d+ due to the following error: Encountered an error in "
            r"forwardAsync function: .*Requested beam width 2 is larger than configured max beam width 1"
        )
        with pytest.raises(InferenceServerException, match=refusal):
            grpc_results(served, model, too_wide, ["text_output"])


def test_llm_outputs_arrive_only_when_asked_for(served: Served, tmp_path: Path) -> None:
    # The TensorRT-LLM backend answers log probs and logits only when the request asks for them, and
    # batch_index / sequence_index only when they tell a batch's items or sequences apart.
    if served.whisper:
        return
    tensors, _ = image_request(served, tmp_path)
    asked = [*tensors, Tensor("return_log_probs", np.array([[True]]), "BOOL")]
    extras = ["cum_log_probs", "output_log_probs", "context_logits", "generation_logits"]
    extras += ["batch_index", "sequence_index"]
    for model in _text_models(served):
        with served.client("grpc") as client:
            declared = {tensor["name"] for tensor in client.model_config(model)["output"]}
        wanted = ["text_output", *(name for name in extras if name in declared)]
        (result,) = grpc_results(served, model, tensors, wanted)
        assert [name for name in wanted if result.as_numpy(name) is not None] == ["text_output"]
        (result,) = grpc_results(served, model, asked, wanted)
        assert result.as_numpy("cum_log_probs").shape == (1, 1)  # [1, beams]
        assert result.as_numpy("output_log_probs").shape[:2] == (1, 1)  # [1, beams, tokens]
        assert result.as_numpy("context_logits") is None
