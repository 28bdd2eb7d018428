"""Decoding of the media in chat content parts, for real enough to refuse garbage, and a description of each.

What the real server accepts (tensorrt_llm/inputs/utils.py, media loaders): `data:<type>;base64,<data>` URLs
(anything but base64 is `NotImplementedError: Only base64 data URLs are supported for now.`), http(s) URLs
(fetched; 1.2-era code fetches any host, later main refuses non-public addresses) and, for a bare path, a
local file. The double decodes data URLs, fetches http(s) only from hosts named in MMD_DOUBLE_URL_ALLOW_HOSTS
(its own setting: in tests only 127.0.0.1; the real server has no allowlist, see the doc) and never reads a
local file. Images are opened with Pillow, audio with soundfile (as the real loaders), video with Pillow's
multi-frame formats (animated GIF, WebP, PNG) or PyAV when installed (the real server uses OpenCV).
`image_embeds` must be base64 of a `torch.save` file (a zip archive). Imports Pillow, soundfile and the
standard library.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

import soundfile
from PIL import Image, ImageStat, UnidentifiedImageError

ALLOW_HOSTS_ENV = "MMD_DOUBLE_URL_ALLOW_HOSTS"
MAX_FETCH_BYTES = 64 * 1024 * 1024
FETCH_TIMEOUT_SECONDS = 10
DEFAULT_VIDEO_FRAMES = 10  # the real video loader's num_frames default
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive


class MediaError(Exception):
    """A part's media cannot be loaded; the message goes into the 400 error response."""


@dataclass(frozen=True)
class MediaPolicy:
    """Where media may come from."""

    url_hosts: frozenset[str]

    @classmethod
    def from_env(cls) -> MediaPolicy:
        """The hosts in MMD_DOUBLE_URL_ALLOW_HOSTS (comma-separated; empty: no URL is fetched)."""
        raw = os.environ.get(ALLOW_HOSTS_ENV, "")
        return cls(frozenset(h.strip().lower() for h in raw.split(",") if h.strip()))


def _fetch(url: str, policy: MediaPolicy) -> bytes:
    host = (urllib.parse.urlparse(url).hostname or "").lower()
    if host not in policy.url_hosts:
        raise MediaError(
            f"the trtllm-serve double fetches no URL from {host or url!r}: name the host in "
            f"{ALLOW_HOSTS_ENV} (the real server fetches it; restrict its egress with a NetworkPolicy)"
        )
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_SECONDS) as response:
            data: bytes = response.read(MAX_FETCH_BYTES + 1)
    except (urllib.error.URLError, OSError) as error:
        raise MediaError(f"Failed to fetch {url}: {error}") from error
    if len(data) > MAX_FETCH_BYTES:
        raise MediaError(f"{url} is larger than {MAX_FETCH_BYTES} bytes")
    return data


def media_bytes(url: str, policy: MediaPolicy) -> bytes:
    """The bytes a part's URL names: a base64 data URL, or an allowed http(s) URL."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "data":
        spec, _, data = parsed.path.partition(",")
        if not spec.endswith(";base64"):
            raise MediaError("Only base64 data URLs are supported for now.")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as error:
            raise MediaError(f"Invalid base64 data in the data URL: {error}") from error
    if parsed.scheme in ("http", "https"):
        return _fetch(url, policy)
    raise MediaError(
        f"the trtllm-serve double reads no local file ({url!r}); send a data URL or an http(s) URL "
        "(the real server opens a local path it is given)"
    )


def describe_image(data: bytes) -> str:
    """`64x48, mean colour #8c6a40`, or MediaError when the bytes are no image."""
    try:
        with Image.open(io.BytesIO(data)) as opened:
            opened.load()
            image = opened.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise MediaError(f"Failed to load image: {error}") from error
    red, green, blue = (round(v) for v in ImageStat.Stat(image).mean)
    return f"{image.width}x{image.height}, mean colour #{red:02x}{green:02x}{blue:02x}"


def _pyav_frames(data: bytes) -> tuple[int, int, int] | None:
    try:
        import av  # type: ignore[import-not-found]  # optional: mp4 and friends when installed
    except ImportError:
        return None
    try:
        with av.open(io.BytesIO(data)) as container:
            frames = list(container.decode(video=0))
    except Exception as error:  # PyAV raises its own error tree
        raise MediaError(f"Failed to load video: {error}") from error
    if not frames:
        raise MediaError("Failed to load video: no frames")
    return len(frames), frames[0].width, frames[0].height


def describe_video(data: bytes, num_frames: int) -> str:
    """`4 frames of 32x24 (4 sampled)`, or MediaError when the bytes are no video."""
    try:
        with Image.open(io.BytesIO(data)) as opened:
            total = getattr(opened, "n_frames", 1)
            width, height = opened.size
            for index in range(total):
                opened.seek(index)
                opened.load()
    except (UnidentifiedImageError, OSError, ValueError, EOFError):
        total = 0
    if total < 2:
        decoded = _pyav_frames(data)
        if decoded is None:
            raise MediaError(
                "Failed to load video: the double decodes animated GIF/WebP/PNG (and what PyAV reads, "
                "when installed)"
            )
        total, width, height = decoded
    sampled = min(num_frames, total) if num_frames > 0 else total
    return f"{total} frames of {width}x{height} ({sampled} sampled)"


def describe_audio(data: bytes) -> str:
    """`1.50 s at 16000 Hz, 1 channel(s)`, or MediaError when soundfile cannot read the bytes."""
    try:
        samples, rate = soundfile.read(io.BytesIO(data))
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as error:
        raise MediaError(f"Failed to load audio: {error}") from error
    channels = 1 if samples.ndim == 1 else samples.shape[1]
    return f"{len(samples) / rate:.2f} s at {rate} Hz, {channels} channel(s)"


def describe_image_embeds(encoded: str) -> str:
    """`embedding of N bytes`, or MediaError when it is not base64 of a torch.save file."""
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as error:
        raise MediaError(f"image_embeds is not base64: {error}") from error
    if not data.startswith(_ZIP_MAGIC):
        raise MediaError("image_embeds is not a torch.save() tensor (base64 of its zip archive)")
    return f"embedding of {len(data)} bytes"
