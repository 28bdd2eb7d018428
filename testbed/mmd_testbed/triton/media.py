"""Small media made on the spot for trying a server: JPEG/PNG images, video frames, tone-coded speech WAVs.

No downloads. Used by the triton test tier, the benchmark and the demo.
"""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import soundfile
import soxr
from PIL import Image

from mmd_testbed.triton.doubles import codec


def image(path: Path, size: tuple[int, int] = (64, 48), seed: int = 0, fmt: str = "JPEG") -> Path:
    """A deterministic RGB gradient image."""
    width, height = size
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None, None]
    pixels = (x * np.array([1, 0, 0.5]) + y * np.array([0, 1, 0.5]) + seed * 37) % 256
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.astype(np.uint8)).save(path, format=fmt)
    return path


def jpeg_data_url(path: Path) -> str:
    """The server's only inline image form."""
    return "data:image/jpeg;base64," + base64.b64encode(path.read_bytes()).decode()


def frames(directory: Path, count: int, size: tuple[int, int] = (32, 24)) -> Path:
    """A directory of `count` PNG frames (a moving gradient)."""
    for index in range(count):
        image(directory / f"frame{index:03d}.png", size, seed=index, fmt="PNG")
    return directory


def gif(path: Path, count: int, size: tuple[int, int] = (32, 24)) -> Path:
    """An animated GIF of `count` frames."""
    pictures = [
        Image.open(image(path.parent / f"_gif{i}.png", size, seed=i, fmt="PNG")) for i in range(count)
    ]
    pictures[0].save(path, save_all=True, append_images=pictures[1:], duration=40)
    return path


def speech(path: Path, text: str, rate: int = codec.SAMPLE_RATE, channels: int = 1) -> Path:
    """`text` as tone-coded 'speech' (see doubles.codec), written as a 16-bit WAV at `rate`."""
    samples = codec.tone_audio(text)
    if rate != codec.SAMPLE_RATE:
        samples = soxr.resample(samples, codec.SAMPLE_RATE, rate)
    data = np.repeat(samples[:, None], channels, axis=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, data, rate, subtype="PCM_16")
    return path
