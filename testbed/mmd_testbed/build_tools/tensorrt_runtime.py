"""Test double of the `tensorrt` Python package: just what the builder's plan check uses.

The fixture installs it as `tensorrt` on the builder's PYTHONPATH. A "plan" is the JSON the recipe double
writes; deserialising anything else fails the way TensorRT does (None).
"""

from __future__ import annotations

import json
from typing import Any


class Logger:
    """`trt.Logger`: a severity and a log method."""

    INFO = 3
    WARNING = 2

    def __init__(self, severity: int = WARNING) -> None:
        self.severity = severity

    def log(self, severity: int, message: str) -> None:
        """Print `message` when it is at least as severe as the logger's level."""
        if severity <= self.severity:
            print(f"[TRT] {message}", flush=True)


class _Engine:
    def __init__(self, tensors: list[str]) -> None:
        self._tensors = tensors

    @property
    def num_io_tensors(self) -> int:
        return len(self._tensors)

    def get_tensor_name(self, index: int) -> str:
        return self._tensors[index]


class Runtime:
    """`trt.Runtime`: deserialises the recipe double's plans."""

    def __init__(self, logger: Logger) -> None:
        self.logger = logger

    def deserialize_cuda_engine(self, data: bytes) -> Any:
        """The engine the double's plan file describes, or None (as TensorRT) when it is not one."""
        try:
            return _Engine(list(json.loads(data)["tensors"]))
        except (ValueError, KeyError, TypeError):
            self.logger.log(Logger.WARNING, "Error Code 1: Serialization (the plan is corrupt)")
            return None
