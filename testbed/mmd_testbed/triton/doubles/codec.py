"""Encodings shared by the test doubles (inside the Python backend stub) and the tests that read their output.

Part of the doubles, not the real models. Imports only numpy and the standard library, because it runs
inside the tritonserver's Python backend stub as well as in the tests, benchmarks and demo.

- A byte tokenizer: token id = UTF-8 byte (0..255); ids >= `VOCAB_SIZE` are fake prompt-table ids, as the
  real preprocessing inserts for image features.
- The digest the LLM double generates: `segment|segment|...`, each `name:key=value,key=value`, which
  `parse_digest` turns back into a dict for assertions.
- A tone alphabet standing in for speech: the test writes text as a sequence of tones, the whisper_bls
  double turns audio into a band spectrogram, and the LLM double reads the tones back. So a transcript
  proves that the audio itself (its pitch and timing, after any resampling) crossed the server.
- BF16 tensors via DLPack (numpy has no bfloat16): the only way a Python model can produce or read one.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
from typing import Any

import numpy as np

VOCAB_SIZE = 256
SAMPLE_RATE = 16000
# Whisper's front end: 25 ms windows every 10 ms, 3000 frames (30 s) unless zero_pad.
N_FFT = 400
HOP = 160
MAX_FRAMES = 3000
TONE_ALPHABET = " abcdefghijklmnopqrstuvwxyz"
TONE_BASE_HZ = 300.0
TONE_STEP_HZ = 150.0
TONE_SECONDS = 0.07
GAP_SECONDS = 0.02


def encode_text(text: str) -> list[int]:
    """Token ids of `text` in the byte tokenizer."""
    return list(text.encode("utf-8"))


def decode_ids(ids: Any) -> str:
    """Text of byte ids; fake prompt-table ids and specials (>= VOCAB_SIZE) are skipped."""
    data = bytes(int(i) for i in ids if 0 <= int(i) < VOCAB_SIZE)
    return data.decode("utf-8", errors="replace")


def short_hash(data: bytes) -> str:
    """Eight hex digits of SHA-256: enough to tell test inputs apart."""
    return hashlib.sha256(data).hexdigest()[:8]


def parse_digest(text: str) -> dict[str, dict[str, str]]:
    """Split `head|name:k=v,k=v|...` into {name: {k: v}}; the head (model type) is under `type`."""
    parts = [part for part in text.split("|") if part]
    result: dict[str, dict[str, str]] = {"type": {"name": parts[0] if parts else ""}}
    for part in parts[1:]:
        name, _, body = part.partition(":")
        items: dict[str, str] = {}
        depth, current = 0, ""
        # Commas inside shapes ([1,3,336,336]) do not separate items.
        for char in body + ",":
            if char == "[":
                depth += 1
            elif char == "]":
                depth -= 1
            if char == "," and depth == 0:
                if current:
                    key, _, value = current.partition("=")
                    items[key] = value
                current = ""
            else:
                current += char
        result[name] = items
    return result


def tone_frequency(index: int) -> float:
    """Frequency (Hz) of the tone for alphabet position `index`."""
    return TONE_BASE_HZ + TONE_STEP_HZ * index


def tone_audio(text: str, rate: int = SAMPLE_RATE, amplitude: float = 0.5) -> np.ndarray:
    """`text` (letters and spaces) as tones, one per character, separated by short silences."""
    pieces = []
    tone_t = np.arange(int(TONE_SECONDS * rate)) / rate
    gap = np.zeros(int(GAP_SECONDS * rate), dtype=np.float64)
    for char in text.lower():
        index = TONE_ALPHABET.index(char)
        pieces += [amplitude * np.sin(2 * math.pi * tone_frequency(index) * tone_t), gap]
    return np.concatenate([gap, *pieces]).astype(np.float32)


def _band_edges(n_bands: int) -> np.ndarray:
    bins = N_FFT // 2 + 1
    return (np.arange(bins) * n_bands) // bins


def band_spectrogram(wav: np.ndarray, n_bands: int) -> np.ndarray:
    """Log band energies [frames, n_bands]: |rFFT| of Hann windows, max-pooled into equal-width bands.

    A stand-in for Whisper's log-mel front end (not a mel filterbank): enough to carry pitch and timing.
    """
    padded = np.concatenate([np.zeros(N_FFT // 2, np.float32), wav.astype(np.float32)])
    frames = max(1, len(wav) // HOP)
    padded = np.concatenate([padded, np.zeros(frames * HOP + N_FFT, np.float32)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:frames]
    magnitude = np.abs(np.fft.rfft(windows * np.hanning(N_FFT), axis=1))
    bands = np.full((frames, n_bands), 0.0, dtype=np.float64)
    np.maximum.at(bands.T, _band_edges(n_bands), magnitude.T)
    return np.log10(bands + 1e-6).astype(np.float32)


def read_tones(features: np.ndarray, n_bands: int) -> str:
    """The text that `tone_audio` wrote, recovered from `band_spectrogram` frames [frames, n_bands]."""
    edges = _band_edges(n_bands)
    bin_hz = SAMPLE_RATE / N_FFT
    centers = np.array([bin_hz * np.mean(np.nonzero(edges == band)[0]) for band in range(n_bands)])
    text, run_index, run_length = [], -1, 0
    for frame in np.asarray(features, dtype=np.float64):
        index = -1
        if frame.max() > 0.0:  # louder than |X| = 1: a tone, not silence
            peak = int(frame.argmax())
            lo, hi = max(0, peak - 1), min(n_bands, peak + 2)
            weights = 10.0 ** frame[lo:hi]
            hz = float(np.sum(weights * centers[lo:hi]) / np.sum(weights))
            index = round((hz - TONE_BASE_HZ) / TONE_STEP_HZ)
            if not 0 <= index < len(TONE_ALPHABET):
                index = -1
        if index == run_index:
            run_length += 1
            continue
        if run_index >= 0 and run_length >= 2:
            text.append(TONE_ALPHABET[run_index])
        run_index, run_length = index, 1
    if run_index >= 0 and run_length >= 2:
        text.append(TONE_ALPHABET[run_index])
    return "".join(text).strip()


# --- BF16 through DLPack (numpy has no bfloat16 dtype) ---------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_DL_CPU, _DL_BFLOAT = 1, 4
# Consumers call the deleter when they drop the tensor (a NULL one crashes the Python backend); the memory
# itself is kept alive by `_ALIVE`, so the deleter has nothing to do.
_DELETER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_NO_OP_DELETER = _DELETER_TYPE(lambda _pointer: None)
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
# The capsules carry no deleter, so their memory is kept here until well after Triton copied it.
_ALIVE: list[tuple[Any, ...]] = []


def bf16_capsule(values: np.ndarray) -> Any:
    """A DLPack capsule holding `values` as BF16 (truncated float32), for `pb_utils.Tensor.from_dlpack`."""
    floats = np.ascontiguousarray(values, dtype=np.float32)
    bits = (floats.view(np.uint32) >> 16).astype(np.uint16)
    shape = (ctypes.c_int64 * bits.ndim)(*bits.shape)
    managed = _DLManagedTensor()
    managed.dl_tensor.data = bits.ctypes.data
    managed.dl_tensor.device = _DLDevice(_DL_CPU, 0)
    managed.dl_tensor.ndim = bits.ndim
    managed.dl_tensor.dtype = _DLDataType(_DL_BFLOAT, 16, 1)
    managed.dl_tensor.shape = shape
    managed.dl_tensor.strides = None
    managed.dl_tensor.byte_offset = 0
    managed.deleter = ctypes.cast(_NO_OP_DELETER, ctypes.c_void_p)
    _ALIVE.append((bits, shape, managed))
    del _ALIVE[:-512]
    return _capsule_new(ctypes.addressof(managed), b"dltensor", None)


def bf16_from_capsule(capsule: Any) -> np.ndarray:
    """Float32 copy of the BF16 tensor in a DLPack capsule (from `pb_utils.Tensor.to_dlpack`)."""
    name = _capsule_name(capsule)
    managed = _DLManagedTensor.from_address(_capsule_pointer(capsule, name))
    tensor = managed.dl_tensor
    if tensor.dtype.code != _DL_BFLOAT or tensor.dtype.bits != 16:
        raise ValueError(f"not a BF16 tensor: code {tensor.dtype.code}, {tensor.dtype.bits} bits")
    shape = tuple(int(tensor.shape[i]) for i in range(tensor.ndim))
    raw = ctypes.string_at(tensor.data + tensor.byte_offset, 2 * math.prod(shape))
    bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32).reshape(shape).copy()
