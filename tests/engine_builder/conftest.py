"""A build image without GPUs: the test doubles of the GPU tools on PATH, in a private examples tree.

Plans are the operator's own, rendered from `examples/*.yaml`; only the PersistentVolumeClaim mount
(`/sources`) is moved into the test's directory, through the plan, as the builder reads sources wherever
the plan says.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine_builder import versions
from engine_builder.__main__ import main
from mmd_testbed import build_tools
from mmd_testbed.build_tools.toolbox import install as install_toolbox
from mmd_testbed.build_tools.trtllm_tools import write_lora_adapter, write_model_repo
from tests.support.examples import EXAMPLE_PATHS, plan_example

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = [path.stem for path in EXAMPLE_PATHS]
DOUBLES = Path(build_tools.__file__).resolve().parent
SOURCES_MOUNT = "/sources"

_rendered: dict[str, dict[str, Any]] = {}


def rendered_plan(example: str) -> dict[str, Any]:
    """The build plan the operator writes for `examples/<example>.yaml`, as JSON data."""
    if example not in _rendered:
        _, plan = plan_example(example)
        _rendered[example] = plan.build.model_dump(mode="json")
    return json.loads(json.dumps(_rendered[example]))  # type: ignore[no-any-return]


@dataclass
class Toolbox:
    """The doubles, a cache volume and a termination log, all under one temporary directory."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def examples(self) -> Path:
        return self.root / "examples"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def termination_log(self) -> Path:
        return self.root / "termination-log"

    @property
    def call_log(self) -> Path:
        return self.root / "calls.jsonl"

    def plan(self, example: str, **changes: Any) -> Path:
        """Write the operator's plan for `example`, with its PVC sources moved under this toolbox."""
        data = rendered_plan(example)
        data.update(changes)
        for step in data["steps"]:
            step["argv"] = [self._source(arg) for arg in step["argv"]]
        path = self.root / "plans" / f"{example}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(data, indent=2))
        return path

    def _source(self, arg: str) -> str:
        if arg == versions.XCOMPOSER2_VISION_BUILDER:
            return str(DOUBLES / "xcomposer2_recipe.py")
        if not arg.startswith(SOURCES_MOUNT + "/"):
            return arg
        moved = self.root / "sources" / arg.removeprefix(SOURCES_MOUNT + "/")
        if moved.name == "config.json":  # a file of the model directory (the check-context step's)
            self._source(str(Path(arg).parent))
            return str(moved)
        if not moved.exists():
            if moved.relative_to(self.root / "sources").parts[0] == "lora":
                write_lora_adapter(moved)
            else:
                write_model_repo(moved, f"pvc/{moved.name}")
        return str(moved)

    def args(self, plan: Path, *extra: str) -> list[str]:
        """`python -m engine_builder` arguments that build `plan` with the doubles."""
        return [
            "build",
            "--plan",
            str(plan),
            "--cache-dir",
            str(self.cache),
            "--examples-dir",
            str(self.examples),
            "--termination-log",
            str(self.termination_log),
            *extra,
        ]

    def build(self, plan: Path, *extra: str) -> int:
        """Run the builder in this process (its steps are real subprocesses)."""
        return main(self.args(plan, *extra))

    def calls(self) -> list[dict[str, Any]]:
        """Every call of a double so far, in order."""
        if not self.call_log.exists():
            return []
        return [json.loads(line) for line in self.call_log.read_text().splitlines()]

    def result(self) -> dict[str, Any]:
        """The termination message, parsed as plain JSON."""
        return json.loads(self.termination_log.read_text())  # type: ignore[no-any-return]

    def manifest(self, cache_key: str) -> dict[str, Any]:
        return json.loads((self.cache / cache_key / "manifest.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture
def toolbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Toolbox]:
    box = Toolbox(tmp_path)
    install_toolbox(box.bin, box.examples, tmp_path / "pythonpath")
    # `python3` in the plans' argv is this interpreter, which has engine_builder installed.
    monkeypatch.setenv(
        "PATH", os.pathsep.join([str(box.bin), str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "pythonpath"))
    monkeypatch.setenv("ENGINE_BUILDER_ASSUME_TRTLLM_VERSION", versions.TRTLLM_VERSION)
    monkeypatch.setenv("DOUBLE_CALL_LOG", str(box.call_log))
    for name in list(os.environ):
        if (name.startswith("DOUBLE_") and name != "DOUBLE_CALL_LOG") or name in ("HF_TOKEN", "CUDA_VERSION"):
            monkeypatch.delenv(name)
    yield box
