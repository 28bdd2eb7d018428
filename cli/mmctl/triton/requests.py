"""Build the input tensors of one request for a model type: text, images, video, audio, sampling, LoRA.

What to send follows the knowledge table: which image inputs the type's server can decode
(`image_inputs`), video and multi-image support, the prompt template and image marker, end/pad ids,
`prompt_table_extra_id` (KV-cache reuse) and LoRA. Types whose server takes only preprocessed pixels
(BLIP-2, LLaVA, VILA, InternLM-XComposer2) get a plain resize to the vision tower's input size and the
tower's per-channel normalisation (`IMAGE_GEOMETRY`); this is simpler than the Hugging Face processors
(no centre crop, no padding to square) and is meant for smoke tests, not accuracy work. Audio for Whisper
is read with soundfile and resampled to 16 kHz with soxr. Bad input raises `RequestError` with one line.
Part of the triton adapter: imports numpy, Pillow, soundfile, soxr and our knowledge table; no network
except fetching an image URL that the server itself cannot fetch.
"""

from __future__ import annotations

import base64
import hashlib
import io
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageSequence, UnidentifiedImageError

from mmd_operator.knowledge import (
    MEL_FRAMES_PER_SECOND,
    WHISPER_SAMPLE_RATE,
    ImageInput,
    ModelKnowledge,
    ModelType,
    RepositoryLayout,
    knowledge_of,
)

WHISPER_RATE = WHISPER_SAMPLE_RATE
# The Whisper encoder engine takes at most this many log-mel frames (its fixed max_input_len, 3000):
# whisper_bls pads shorter audio up to it but passes longer audio on, which TensorRT-LLM then refuses.
WHISPER_MAX_FRAMES = knowledge_of(ModelType.WHISPER).build.max_encoder_input_len or 3000
WHISPER_MAX_SECONDS = WHISPER_MAX_FRAMES / MEL_FRAMES_PER_SECOND
JPEG_DATA_URL = "data:image/jpeg;base64,"
_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class ImageGeometry:
    """Input size and normalisation of a vision tower the client preprocesses for."""

    size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


# Defaults of the checkpoints' own image processors (CLIP ViT-L/336 for LLaVA-1.5, EVA/CLIP for BLIP-2,
# SigLIP-384 for VILA-1.5, CLIP ViT-L at 490 for InternLM-XComposer2-VL).
IMAGE_GEOMETRY = {
    ModelType.BLIP2: ImageGeometry(224, _CLIP_MEAN, _CLIP_STD),
    ModelType.LLAVA: ImageGeometry(336, _CLIP_MEAN, _CLIP_STD),
    ModelType.VILA: ImageGeometry(384, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    ModelType.INTERNLM_XCOMPOSER2: ImageGeometry(490, _CLIP_MEAN, _CLIP_STD),
}
# Qwen2-VL's reference client sends 504x504 pixels (18x18 merged patches = 324 features).
QWEN2_VL_SIZE = 504
IMAGE_SOURCE_INPUTS = ("image_input", "image_bytes_input", "image_url_input", "video_bytes_input")
# Why a type's server does not declare `prompt_table_extra_id` (Triton alone would only call it unexpected).
_NO_EXTRA_ID = {
    ModelType.QWEN2_VL: "the v0.19.0 preprocessing builds no extra ids for qwen2_vl and fails on the id, "
    "so the server does not declare it",
    ModelType.INTERNLM_XCOMPOSER2: "the reference ensemble of this type has no such input",
}


class RequestError(Exception):
    """The request cannot be built: a missing file, an input the model type does not take, ..."""


@dataclass(frozen=True)
class Tensor:
    """One input tensor, with its Triton datatype name."""

    name: str
    array: np.ndarray
    datatype: str


@dataclass(frozen=True)
class Sampling:
    """Sampling options; None leaves the server's default."""

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    length_penalty: float | None = None
    seed: int | None = None
    beam_width: int | None = None


@dataclass(frozen=True)
class TextRequest:
    """Everything a user can ask of a vision-language model in one request."""

    text: str
    images: Sequence[str] = ()
    video: str | None = None
    frames: int | None = None
    max_tokens: int = 64
    sampling: Sampling = field(default_factory=Sampling)
    end_id: int | None = None
    pad_id: int | None = None
    stream: bool = False
    prompt_table_extra_id: int | None = None
    lora_task_id: int | None = None
    lora_path: str | None = None
    # Local images as `data:image/jpeg;base64,` URLs instead of raw bytes (HTTP generate takes no tensors).
    inline_images_as_urls: bool = False
    # Whether the server declares `image_url_input` (the resource's `serving.imageUrlInput`); without
    # it the client fetches an image URL itself and sends the pixels.
    server_fetches_urls: bool = True
    # The seed's input name: `random_seed` up to TensorRT-LLM 0.19.0, `seed` from 1.x (the server's
    # release declares one of them).
    seed_input: str = "random_seed"


def _scalar(name: str, value: object, datatype: str) -> Tensor:
    numpy_type = {
        "INT32": np.int32,
        "UINT64": np.uint64,
        "FP32": np.float32,
        "BOOL": np.bool_,
    }[datatype]
    return Tensor(name, np.array([[value]], dtype=numpy_type), datatype)


def _text(name: str, text: str) -> Tensor:
    return Tensor(name, np.array([[text.encode("utf-8")]], dtype=np.object_), "BYTES")


def _is_url(source: str) -> bool:
    return source.startswith(("http://", "https://", "data:"))


def _read_url(source: str) -> bytes:
    if source.startswith("data:"):
        _, _, payload = source.partition(",")
        try:
            return base64.b64decode(payload, validate=True)
        except ValueError:
            raise RequestError(f"{source[:40]}...: not valid base64 image data") from None
    try:
        with urllib.request.urlopen(source, timeout=30) as reply:
            return bytes(reply.read())
    except (urllib.error.URLError, OSError) as error:
        raise RequestError(f"{source}: cannot fetch the image: {getattr(error, 'reason', error)}") from None


def _read_source(source: str) -> bytes:
    if _is_url(source):
        return _read_url(source)
    try:
        return Path(source).read_bytes()
    except FileNotFoundError:
        raise RequestError(f"{source}: no such file") from None
    except OSError as error:
        raise RequestError(f"{source}: cannot read: {error.strerror}") from None


def load_image(source: str) -> Image.Image:
    """An RGB image from a file path, an http(s) URL or a data URL."""
    data = _read_source(source)
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError):
        raise RequestError(f"{source[:80]}: not an image Pillow can read") from None


def _jpeg_data_url(source: str) -> str:
    """A local image as the only inline form the server accepts: `data:image/jpeg;base64,`."""
    data = _read_source(source)
    if not data.startswith(b"\xff\xd8"):  # not a JPEG: re-encode, the server refuses other data URLs
        buffer = io.BytesIO()
        load_image(source).save(buffer, format="JPEG", quality=95)
        data = buffer.getvalue()
    return JPEG_DATA_URL + base64.b64encode(data).decode("ascii")


def preprocess(image: Image.Image, geometry: ImageGeometry) -> np.ndarray:
    """Resize to the tower's size (bicubic) and normalise per channel: FP16 [3, size, size]."""
    resized = image.resize((geometry.size, geometry.size), Image.Resampling.BICUBIC)
    pixels = np.asarray(resized, dtype=np.float32) / np.float32(255.0)
    mean, std = np.array(geometry.mean, np.float32), np.array(geometry.std, np.float32)
    return ((pixels - mean) / std).transpose(2, 0, 1).astype(np.float16)


def _pixels(images: Sequence[Image.Image], size: tuple[int, int] | None) -> np.ndarray:
    """Raw RGB pixels [1, N, H, W, 3] uint8, all resized to `size` (default: the first image's size)."""
    target = size or images[0].size
    return np.stack([np.asarray(image.resize(target), dtype=np.uint8) for image in images])[None]


def load_frames(source: str, count: int) -> list[Image.Image]:
    """`count` frames spread evenly over a video.

    The video is a directory of frame images (sorted by name), a multi-frame image Pillow reads (GIF, APNG,
    TIFF), or, when PyAV is installed, any video file it decodes.
    """
    if count < 1:
        raise RequestError(f"--frames must be at least 1, not {count}")
    path = Path(source)
    frames: list[Image.Image] = []
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file())
        frames = [load_image(str(p)) for p in files]
    elif not path.exists():
        raise RequestError(f"{source}: no such file or directory")
    else:
        try:
            with Image.open(path) as video:
                frames = [frame.convert("RGB") for frame in ImageSequence.Iterator(video)]
        except (UnidentifiedImageError, OSError):
            frames = _decode_with_pyav(path)
    if not frames:
        raise RequestError(f"{source}: no frames found")
    picks = np.linspace(0, len(frames) - 1, num=min(count, len(frames))).round().astype(int)
    return [frames[i] for i in picks]


def _decode_with_pyav(path: Path) -> list[Image.Image]:
    try:
        import av  # type: ignore[import-not-found]
    except ImportError:
        raise RequestError(
            f"{path}: not a frame directory or multi-frame image; decoding {path.suffix or 'this'} "
            "video needs PyAV (pip install av)"
        ) from None
    with av.open(str(path)) as container:
        return [frame.to_image().convert("RGB") for frame in container.decode(video=0)]


def _prompt(knowledge: ModelKnowledge, text: str, images: int) -> str:
    """`text` wrapped as the type's clients send it, with one image marker per image.

    Raises:
        RequestError: where the server refuses a prompt whose markers do not number its images.
    """
    marker = knowledge.image_marker
    if marker and marker in text:
        placed = text.count(marker)
        if knowledge.one_marker_per_image and placed != images:
            # The words of the server's own refusal (transformers' MllamaProcessor).
            raise RequestError(
                f"The number of image tokens in each text ([{placed}]) should be the same as the number of "
                f"provided images per batch ([{images}]): the text has {placed} {marker}, one per image"
            )
        return text  # the user placed the markers
    template = knowledge.prompt_template
    if marker and marker in template:
        if images == 0:
            template = template.replace(marker, "", 1).lstrip("\n")
        elif images > 1:
            template = template.replace(marker, marker + "\n" + (marker + "\n") * (images - 1), 1)
    return template.format(text=text)


def image_extra_id(sources: Sequence[str]) -> int:
    """A `prompt_table_extra_id` naming the images or video of `sources`: a digest of their bytes.

    KV-cache reuse tells prompts with the same text apart by it; it must be a uint64 of at least 1. A
    URL is named by itself, a directory of frames by its files in order.
    """
    digest = hashlib.sha256()
    for source in sources:
        path = Path(source)
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        for file in files:
            digest.update(file.read_bytes() if file.is_file() else source.encode())
    # Below 2^63: some clients read the id as a signed 64-bit integer.
    return int.from_bytes(digest.digest()[:8], "big") % ((1 << 63) - 1) + 1


def _refuse(knowledge: ModelKnowledge, what: str) -> RequestError:
    return RequestError(f"{knowledge.model_type} does not accept {what}")


def _image_tensors(knowledge: ModelKnowledge, request: TextRequest) -> list[Tensor]:
    accepts = knowledge.image_inputs
    sources = list(request.images)
    if request.video is not None:
        if not knowledge.video:
            raise _refuse(knowledge, "video")
        if sources:
            raise RequestError("send either images or a video, not both")
        if request.frames is None:
            raise RequestError("--video needs --frames N")
        frames = load_frames(request.video, request.frames)
        return [Tensor("video_bytes_input", _pixels(frames, None), "UINT8")]
    if not sources:
        return []
    if not accepts:
        raise _refuse(knowledge, "images")
    if len(sources) > 1 and not knowledge.multi_image:
        raise RequestError(f"{knowledge.model_type} takes one image per request, not {len(sources)}")
    if ImageInput.URL in accepts and request.server_fetches_urls and len(sources) == 1:
        source = sources[0]
        if source.startswith(("http://", "https://", JPEG_DATA_URL)):
            return [_text("image_url_input", source)]
        if source.startswith("data:") or request.inline_images_as_urls:
            return [_text("image_url_input", _jpeg_data_url(source))]
    images = [load_image(source) for source in sources]
    if ImageInput.BYTES in accepts:
        size = (QWEN2_VL_SIZE, QWEN2_VL_SIZE) if knowledge.model_type is ModelType.QWEN2_VL else None
        return [Tensor("image_bytes_input", _pixels(images, size), "UINT8")]
    geometry = IMAGE_GEOMETRY[knowledge.model_type]
    pixels = np.stack([preprocess(image, geometry) for image in images])
    if knowledge.layout is RepositoryLayout.XCOMPOSER2:
        return [Tensor("image_input", pixels[:1], "FP16")]  # [1, 3, 490, 490]: one image, no count
    return [Tensor("image_input", pixels[None], "FP16")]  # [1, N, 3, H, W]


def _lora_tensors(knowledge: ModelKnowledge, request: TextRequest) -> list[Tensor]:
    if request.lora_task_id is None:
        if request.lora_path is not None:
            raise RequestError("--lora-path needs --lora-task-id")
        return []
    if not knowledge.lora:
        raise _refuse(knowledge, "LoRA adapters")
    tensors = [_scalar("lora_task_id", request.lora_task_id, "UINT64")]
    if request.lora_path is None:
        return tensors  # the server has the adapter cached under this id
    directory = Path(request.lora_path)
    weights, config = directory / "model.lora_weights.npy", directory / "model.lora_config.npy"
    if not config.exists():
        config = directory / "model.lora_keys.npy"
    for file in (weights, config):
        if not file.exists():
            raise RequestError(f"{file}: no such file (convert the adapter with hf_lora_convert.py)")
    lora_weights, lora_config = np.load(weights), np.load(config)
    if lora_weights.ndim == 2:
        lora_weights = lora_weights[None]
    if lora_config.ndim == 2:
        lora_config = lora_config[None]
    return [
        *tensors,
        Tensor("lora_weights", lora_weights.astype(np.float16), "FP16"),
        Tensor("lora_config", lora_config.astype(np.int32), "INT32"),
    ]


def text_request(knowledge: ModelKnowledge, request: TextRequest) -> list[Tensor]:
    """The ensemble (or tensorrt_llm_bls) inputs of a vision-language request.

    Raises:
        RequestError: for input the model type does not accept, or unreadable files.
    """
    if knowledge.layout is RepositoryLayout.WHISPER:
        raise RequestError(f"{knowledge.model_type} transcribes audio: use --audio")
    tensors = _image_tensors(knowledge, request)
    if not tensors and not knowledge.text_only_requests:
        # The real multimodal_encoders refuses a request without an image for every type but mllama.
        raise RequestError(f"{knowledge.model_type} needs an image with every request (--image)")
    images = len(request.images) if request.images else (1 if request.video else 0)
    tensors.insert(0, _text("text_input", _prompt(knowledge, request.text, images)))
    tensors.append(_scalar("max_tokens", request.max_tokens, "INT32"))
    end_id = request.end_id if request.end_id is not None else knowledge.end_id
    pad_id = request.pad_id if request.pad_id is not None else knowledge.pad_id
    if end_id is not None:
        tensors.append(_scalar("end_id", end_id, "INT32"))
    if pad_id is not None:
        tensors.append(_scalar("pad_id", pad_id, "INT32"))
    sampling = request.sampling
    for name, value, datatype in (
        ("temperature", sampling.temperature, "FP32"),
        ("top_k", sampling.top_k, "INT32"),
        ("top_p", sampling.top_p, "FP32"),
        ("repetition_penalty", sampling.repetition_penalty, "FP32"),
        ("presence_penalty", sampling.presence_penalty, "FP32"),
        ("frequency_penalty", sampling.frequency_penalty, "FP32"),
        ("length_penalty", sampling.length_penalty, "FP32"),
        (request.seed_input, sampling.seed, "UINT64"),
        ("beam_width", sampling.beam_width, "INT32"),
    ):
        if value is not None:
            tensors.append(_scalar(name, value, datatype))
    tensors.append(_scalar("stream", request.stream, "BOOL"))
    if request.prompt_table_extra_id is not None:
        if not knowledge.prompt_table_extra_id:
            why = _NO_EXTRA_ID.get(knowledge.model_type, "its server does not declare it")
            raise _refuse(knowledge, f"prompt_table_extra_id: {why}")
        if request.prompt_table_extra_id < 1:
            raise RequestError("--prompt-table-extra-id must be at least 1")
        tensors.append(_scalar("prompt_table_extra_id", request.prompt_table_extra_id, "UINT64"))
    return tensors + _lora_tensors(knowledge, request)


@dataclass(frozen=True)
class Audio:
    """Mono float32 samples at 16 kHz."""

    samples: np.ndarray

    @property
    def seconds(self) -> float:
        """Duration."""
        return len(self.samples) / WHISPER_RATE


def load_audio(path: str) -> Audio:
    """Read an audio file as mono 16 kHz float32, resampling other rates.

    Raises:
        RequestError: for a missing or unreadable file, or audio longer than Whisper's 30 s window.
    """
    import soundfile
    import soxr

    if not Path(path).is_file():
        raise RequestError(f"{path}: no such file")
    try:
        samples, rate = soundfile.read(path, dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError) as error:
        raise RequestError(f"{path}: not an audio file soundfile can read ({error})") from None
    mono = samples.mean(axis=1)
    if rate != WHISPER_RATE:
        mono = soxr.resample(mono, rate, WHISPER_RATE)
    audio = Audio(np.ascontiguousarray(mono, dtype=np.float32))
    if audio.seconds > WHISPER_MAX_SECONDS:
        frames = round(audio.seconds * MEL_FRAMES_PER_SECOND)
        limit = f"{WHISPER_MAX_FRAMES} ({WHISPER_MAX_SECONDS:.0f} s)"
        raise RequestError(
            f"{path}: {audio.seconds:.1f} s of audio is {frames} mel frames; Whisper's encoder takes at "
            f"most {limit} and TensorRT-LLM refuses more (Encoder length exceeds maximum encoder input "
            f"length): split it into pieces of {WHISPER_MAX_SECONDS:.0f} s or less"
        )
    if len(mono) == 0:
        raise RequestError(f"{path}: no audio samples")
    return audio


def audio_request(knowledge: ModelKnowledge, audio: Audio, prefix: str | None = None) -> list[Tensor]:
    """The whisper_bls inputs for one utterance."""
    if knowledge.layout is not RepositoryLayout.WHISPER:
        raise _refuse(knowledge, "audio")
    samples = audio.samples
    return [
        Tensor("WAV", samples[None], "FP32"),
        Tensor("WAV_LENS", np.array([[len(samples)]], dtype=np.int32), "INT32"),
        _text("TEXT_PREFIX", prefix if prefix is not None else knowledge.prompt_template),
    ]
