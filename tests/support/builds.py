"""A build's success summary as the engine builder reports it, for tests of what reads one."""

from __future__ import annotations

from engine_builder.result_format import BuildSucceeded, Gpu, Versions


def summary(cache_key: str = "ea0906e7c1c53f8c5bf9", *, seconds: float = 1834.2) -> BuildSucceeded:
    """A plausible success summary of `cache_key`."""
    return BuildSucceeded(
        cache_key=cache_key,
        cache_hit=False,
        versions=Versions(tensorrt_llm="0.19.0", tensorrt="10.10.0.31", cuda="12.9.0.043"),
        gpu=Gpu(name="NVIDIA H100 80GB HBM3", compute_capability="9.0", count=8),
        total_bytes=14_123_456_789,
        sizes={"encoder": 623_456_789, "llm": 13_500_000_000},
        seconds=seconds,
    )
