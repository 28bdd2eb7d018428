"""The doubles as the CPU stand-in serving image runs them, at the paths of the real serving image.

For the local cluster's real pods. The NGC serving image holds tritonserver at
`/opt/tritonserver/bin/tritonserver`, the TensorRT-LLM backend under `/opt/tritonserver/backends`, and our
serving image adds the tensorrtllm_backend model code under the model code directory. The CPU stand-in
(Dockerfile target `serving-cpu`) keeps those paths and fills them with:

- `/opt/tritonserver/bin/tritonserver`: the CPU tritonserver of the nvidia-pytriton wheel (a wrapper that
  gives it its libraries), with its Python backend;
- `/opt/tritonserver/backends/tensorrtllm/model.py`: a Python-based backend named `tensorrtllm`, so the
  rendered `tensorrt_llm` config loads unchanged (`backend: "tensorrtllm"`);
- `<model code dir>/<code>/1/model.py` for every model-code directory the operator's repositories use.

Each of these `model.py` files is the same generic model: when Triton loads it, it reads the repository it
was assembled into (every `config.pbtxt`, parsed with Triton's protobuf), finds the engine cache entry the
configs point at and the model type its `manifest.json` records, and becomes the double the triton tier
would have generated for that model (`repository.double_specs`, `runtime.build`). So the serving pod runs
the operator's rendered configs and its init container's assembly unchanged, on a real tritonserver.

Three knobs travel with the (fake) weights, like properties of the model; the build doubles carry them from
the checkpoint's `config.json` into the engine's (`pretrained_config.mmd_double`): `load_seconds`, how long
the `tensorrt_llm` double takes to load, as a large engine would; `seconds_per_request`, how long it
works on each request, one at a time, as a saturated GPU would: with more requests than it finishes per
second, they wait in Triton's queue, and the queue time and pending count Triton reports are real; and
`fail_share`, the share of requests it answers with an error (a bad engine, for a canary to catch).

`python -m mmd_testbed.triton.doubles.image install ...` lays these files out (the Dockerfile runs it).
Imports: the standard library, and (inside Triton only) the doubles' runtime.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine_builder import versions
from mmd_operator.knowledge import ModelType, knowledge_of
from mmd_operator.plan.model_code import model_code_directories
from mmd_operator.plan.repository_check import check_repository
from mmd_testbed.triton.doubles.repository import RELEASE_ENV, double_specs

MANIFEST = "manifest.json"
SHIM = (
    '"""A double of this model for the CPU stand-in serving image (cli.triton.doubles.image).\n\n'
    "It reads the repository it was assembled into and becomes the double the triton tier generates.\n"
    '"""\n\n'
    "from mmd_testbed.triton.doubles.image import TritonPythonModel  # noqa: F401\n"
)


def _parameter_paths(configs: dict[str, Any]) -> list[Path]:
    paths = []
    for config in configs.values():
        for value in config.parameters.values():
            if value.string_value.startswith("/"):
                paths.append(Path(value.string_value))
    return paths


def find_manifest(configs: dict[str, Any]) -> dict[str, Any]:
    """The `manifest.json` of the engine cache entry the repository's parameters point into."""
    for path in _parameter_paths(configs):
        for directory in (path, *path.parents):
            candidate = directory / MANIFEST
            if candidate.is_file():
                manifest: dict[str, Any] = json.loads(candidate.read_text())
                return manifest
    raise FileNotFoundError(
        f"no engine cache entry ({MANIFEST}) above any path the repository's configs name"
    )


def repository_spec(repository: Path, model: str) -> dict[str, Any]:
    """The double spec of `model` in the assembled repository at `repository`."""
    texts = {
        entry.name: (entry / "config.pbtxt").read_text()
        for entry in sorted(repository.iterdir())
        if (entry / "config.pbtxt").is_file()
    }
    parsed = check_repository(texts)
    model_type = ModelType(find_manifest(parsed)["plan"]["model_type"])
    # The image's release (its Dockerfile build argument), as the real image's backend is one release's.
    release = versions.ENGINE_RELEASES[os.environ.get(RELEASE_ENV) or versions.TRTLLM_VERSION]
    return double_specs(parsed, knowledge_of(model_type), release)[model]


def engine_knob(spec: dict[str, Any], name: str) -> float:
    """Knob `name` of a `tensorrt_llm` spec's double engine, in seconds (0 unless its config says)."""
    engine = spec.get("parameters", {}).get("gpt_model_path")
    if spec["role"] != "tensorrt_llm" or not engine:
        return 0.0
    try:
        config = json.loads((Path(engine) / "config.json").read_text())
    except (OSError, ValueError):
        return 0.0
    return float(config.get("pretrained_config", {}).get("mmd_double", {}).get(name, 0))


class TritonPythonModel:
    """The Python backend's entry points; the model becomes its double at `initialize`."""

    def initialize(self, args: dict[str, Any]) -> None:
        """Work out the double from the assembled repository, then load it."""
        from mmd_testbed.triton.doubles import runtime  # only importable inside Triton's stub

        spec = repository_spec(Path(args["model_repository"]).parent, args["model_name"])
        seconds = engine_knob(spec, "load_seconds")
        if seconds:
            print(f"{spec['model']} double: loading the engine takes {seconds:.0f} s", flush=True)
            time.sleep(seconds)
        for knob, words in (("seconds_per_request", "each request takes {:g} s"),
                            ("fail_share", "a share of {:g} of the requests fail")):  # fmt: skip
            value = engine_knob(spec, knob)
            if value:
                print(f"{spec['model']} double: {words.format(value)}", flush=True)
                spec = {**spec, knob: value}
        self.delegate = runtime.build(spec)()
        self.delegate.initialize(args)

    def execute(self, requests: list[Any]) -> list[Any] | None:
        """Answer a batch of requests."""
        result: list[Any] | None = self.delegate.execute(requests)
        return result

    def finalize(self) -> None:
        """Nothing to release."""


def install(pytriton: Path, prefix: Path, model_code_dir: Path) -> None:
    """Lay out tritonserver, its backends and the model-code shims (what the Dockerfile's stage runs)."""
    server = pytriton / "pytriton" / "tritonserver"
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    backends = prefix / "backends"
    shutil.copytree(server / "backends", backends, dirs_exist_ok=True)
    # The Python backend starts the stub found beside it; the wheel ships one per Python version.
    shutil.copy2(
        server / "python_backend_stubs" / version / "triton_python_backend_stub", backends / "python"
    )
    (backends / "tensorrtllm").mkdir(parents=True, exist_ok=True)
    (backends / "tensorrtllm" / "model.py").write_text(SHIM)
    wrapper = prefix / "bin" / "tritonserver"
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(
        "#!/bin/sh\n"
        "# The CPU tritonserver of the nvidia-pytriton wheel, with the libraries it ships (the CPU stand-in\n"
        "# for the NGC image's binary; see mmd_testbed.triton.doubles.image).\n"
        f'export LD_LIBRARY_PATH="{pytriton / "nvidia_pytriton.libs"}'
        '${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"\n'
        f'exec {server / "bin" / "tritonserver"} --backend-directory={backends} "$@"\n'
    )
    wrapper.chmod(0o755)
    for code in model_code_directories():
        target = model_code_dir / code / "1" / "model.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(SHIM)


def main(argv: Sequence[str] | None = None) -> int:
    """`install --pytriton DIR --prefix DIR --model-code-dir DIR`."""
    parser = argparse.ArgumentParser(prog="python -m mmd_testbed.triton.doubles.image")
    commands = parser.add_subparsers(dest="command", required=True)
    lay_out = commands.add_parser("install", help="lay out tritonserver, backends and model-code shims")
    lay_out.add_argument(
        "--pytriton", type=Path, required=True, help="where the nvidia-pytriton wheel is installed"
    )
    lay_out.add_argument("--prefix", type=Path, default=Path("/opt/tritonserver"))
    lay_out.add_argument("--model-code-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    install(args.pytriton, args.prefix, args.model_code_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
