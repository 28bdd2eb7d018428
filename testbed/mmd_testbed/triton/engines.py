"""A plan's engine cache entry as the build-tool doubles write it, for the serving doubles to read.

The serving doubles read what the real backend reads from an engine (its `config.json`: max input and
sequence lengths, max beam width, the encoder's max input length, whether logits are gathered) at the
paths the rendered configs name (`/engines/<cacheKey>/llm`, `.../encoder`). On the local cluster the
build Job writes that entry; for a repository served on this machine (`serving.serve`) this module runs
the plan's own `trtllm-build` steps, argv unchanged, through the build-tool double (`trtllm_tools`) into a
local directory standing for the entry, and the doubles map the mount path onto it.

Imports the standard library, the builder's plan format and the build-tool double.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from engine_builder.plan_format import BuildPlan
from mmd_testbed.build_tools import trtllm_tools

WORK = "{work}"


def write_engine_configs(build: BuildPlan, entry: Path, tensor_parallel_size: int = 1) -> Path:
    """Run `build`'s trtllm-build steps with `entry` as their work directory; returns `entry`.

    Each step reads its checkpoint's `config.json`; a stand-in with the plan's mapping is written first
    (the converters' doubles would write the same fields). The engines record the plan's TensorRT-LLM
    version, as its builder image's trtllm-build would.
    """
    entry.mkdir(parents=True, exist_ok=True)
    for step in build.steps:
        if step.argv[0] != "trtllm-build":
            continue
        argv = [arg.replace(WORK, str(entry)) for arg in step.argv[1:]]
        checkpoint = Path(argv[argv.index("--checkpoint_dir") + 1])
        checkpoint.mkdir(parents=True, exist_ok=True)
        mapping = {"world_size": tensor_parallel_size, "tp_size": tensor_parallel_size, "pp_size": 1}
        (checkpoint / "config.json").write_text(json.dumps({"architecture": "double", "mapping": mapping}))
        if "--lora_dir" in argv:  # the adapters come from the job's sources: local stand-ins here
            adapter = entry / "sources" / "lora"
            trtllm_tools.write_lora_adapter(adapter)
            argv[argv.index("--lora_dir") + 1] = str(adapter)
        output = io.StringIO()
        try:
            with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
                trtllm_tools.trtllm_build(argv, version=build.trtllm_version)
        except SystemExit:
            raise RuntimeError(f"the trtllm-build double refused {step.name}: {output.getvalue()}") from None
    return entry
