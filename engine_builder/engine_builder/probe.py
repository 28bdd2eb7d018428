"""Best-effort probes of the build image: installed versions and the GPU.

Versions come from installed package metadata (no import of tensorrt_llm, whose import starts MPI and
CUDA); the GPU from `nvidia-smi`. Whatever cannot be found is recorded as "unknown" and never fails a
build, except the TensorRT-LLM version, which the builder compares with the plan's. Standard library only,
plus the result format.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess

from engine_builder.result_format import UNKNOWN, Gpu, Versions

# Stands in for the installed tensorrt_llm where it is absent: the tests, and dry runs on a laptop.
ASSUME_TRTLLM_VERSION_ENV = "ENGINE_BUILDER_ASSUME_TRTLLM_VERSION"


def _installed(*distributions: str) -> str | None:
    for distribution in distributions:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _cuda_version() -> str:
    # NVIDIA's images set CUDA_VERSION; elsewhere torch knows which CUDA it was built for.
    if os.environ.get("CUDA_VERSION"):
        return os.environ["CUDA_VERSION"]
    if importlib.util.find_spec("torch") is None:
        return UNKNOWN
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]

        return str(torch.version.cuda or UNKNOWN)
    except Exception:  # a broken torch must not fail the build; the version is informative only
        return UNKNOWN


def versions() -> Versions:
    """TensorRT-LLM, TensorRT and CUDA versions of this image."""
    trtllm = _installed("tensorrt_llm")
    assumed = trtllm is None and bool(os.environ.get(ASSUME_TRTLLM_VERSION_ENV))
    if assumed:
        trtllm = os.environ[ASSUME_TRTLLM_VERSION_ENV]
    return Versions(
        tensorrt_llm=trtllm or UNKNOWN,
        tensorrt=_installed("tensorrt", "tensorrt-cu12") or UNKNOWN,
        cuda=_cuda_version(),
        tensorrt_llm_assumed=assumed,
    )


def gpu() -> Gpu:
    """Name and compute capability of the first GPU `nvidia-smi` lists, and how many there are."""
    try:
        listing = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return Gpu()
    rows = [[part.strip() for part in line.split(",")] for line in listing.splitlines() if line.strip()]
    if not rows or len(rows[0]) != 2:
        return Gpu()
    return Gpu(name=rows[0][0], compute_capability=rows[0][1], count=len(rows))
