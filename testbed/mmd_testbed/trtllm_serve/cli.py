"""The double's command line: the real `trtllm-serve` group and its `serve` command, built from the facts.

serve.py declares `trtllm-serve` as a click group whose first argument, when it is no sub-command, is taken
as `serve`'s MODEL (`trtllm-serve MODEL ...` = `trtllm-serve serve MODEL ...`). Every option of `serve` is
declared here from the facts with the real names, types, defaults, flags and choices, so click refuses an
unknown option, a bad value or a missing MODEL with its usage error and exit code 2, as the real one does.
The other sub-commands exist (so their names are not taken for a MODEL) but refuse to run. After parsing, the
double does what serve.py does at its boundary: parses `--media_io_kwargs` as JSON, applies the `--config`
YAML (`config`), loads the model directory (`models`), then serves (`server`); a failure there prints the
exception line the real server ends with and exits 1. Under MPI (`trtllm-llmapi-launch` on every rank of a
world larger than one) it is rank 0: the world must be `tp_size` x `pp_size` ranks (else the LLM API's
`Cannot instantiate Generator ...`), and it joins that world (the Triton doubles' `world`, bounded; a world
that does not form exits 1 saying how many ranks joined of how many) before it serves. Imports click, the
double's modules and `world`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import click

from mmd_testbed.triton.doubles import world
from mmd_testbed.trtllm_serve import config, media, models, server
from mmd_testbed.trtllm_serve.facts import Facts, Option, load

EXIT_FAILED = 1
EXIT_USAGE = 2
SERVE = "serve"
PYTORCH = "pytorch"


class ChoiceWithAlias(click.Choice[str]):
    """A choice that also takes aliases (serve.py: `--backend trt` means `tensorrt`)."""

    def __init__(self, choices: Sequence[str], aliases: Mapping[str, str]) -> None:
        super().__init__(list(choices))
        self.aliases = dict(aliases)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The alias' target, then the usual choice check."""
        return super().convert(self.aliases.get(value, value), param, ctx)


class DefaultGroup(click.Group):
    """A group whose unknown first argument is `serve`'s MODEL."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """`serve` unless the first argument names a sub-command."""
        if args and args[0] not in self.commands:
            return SERVE, self.commands[SERVE], args
        return super().resolve_command(ctx, args)


def _param_type(option: Option) -> click.ParamType[Any]:
    if option.kind == "int":
        return click.INT
    if option.kind == "float":
        return click.FLOAT
    if option.kind == "path":
        return click.Path(exists=option.must_exist, readable=True, resolve_path=True)
    if option.kind == "choice" and option.choices is not None:
        return (
            ChoiceWithAlias(option.choices, option.aliases)
            if option.aliases
            else click.Choice(option.choices)
        )
    return click.STRING  # str, or a choice from a registry serve.py does not list (reasoning, tool parsers)


def click_option(option: Option) -> click.Option:
    """The click option `option` describes."""
    names = [*option.names, option.dest]
    if option.is_flag:
        return click.Option(names, is_flag=True, default=bool(option.default))
    default = option.default if not option.multiple else (option.default or ())
    return click.Option(names, type=_param_type(option), default=default, multiple=option.multiple)


def _fail(error: Exception | str) -> NoReturn:
    line = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    print(line, file=sys.stderr)
    sys.exit(EXIT_FAILED)


def _media_frames(media_io_kwargs: str | None) -> int:
    """`--media_io_kwargs` parsed as serve.py does; the double uses `video.num_frames`."""
    if media_io_kwargs is None:
        return media.DEFAULT_VIDEO_FRAMES
    try:
        parsed = json.loads(media_io_kwargs)
    except json.JSONDecodeError as error:
        _fail(f"ValueError: Invalid JSON for media_io_kwargs: {error}")
    video = parsed.get("video") if isinstance(parsed, dict) else None
    frames = video.get("num_frames", media.DEFAULT_VIDEO_FRAMES) if isinstance(video, dict) else None
    return frames if isinstance(frames, int) else media.DEFAULT_VIDEO_FRAMES


def _join_world(params: Mapping[str, Any], values: Mapping[str, Any]) -> world.World | None:
    """Under MPI, rank 0's share of the LLM API's world: its size checked, then joined (None outside MPI)."""
    size = world.world_size()
    if size <= 1:
        return None
    if world.world_rank() != 0:
        _fail("the trtllm-serve double runs on rank 0 only: start every rank with trtllm-llmapi-launch")
    # The YAML overrides the flags here too.
    tp = int(values.get("tensor_parallel_size") or params["tensor_parallel_size"])
    pp = int(values.get("pipeline_parallel_size") or params["pipeline_parallel_size"])
    if tp * pp != size:
        # executor.py GenerationExecutor.create (it refuses fewer ranks; the double any other number).
        _fail(
            f"RuntimeError: Cannot instantiate Generator for engine built for {tp * pp} ranks, while "
            f"currently running on {size} ranks."
        )
    joined = world.join_or_exit("RuntimeError")
    print(
        f"[trtllm-serve double] rank 0 joined the MPI world: {joined.summary()}", file=sys.stderr, flush=True
    )
    return joined


def _run_serve(facts: Facts, params: Mapping[str, Any]) -> None:
    if params.get("backend") != PYTORCH:
        _fail(f"the trtllm-serve double serves the {PYTORCH} backend only, not {params.get('backend')}")
    frames = _media_frames(params.get("media_io_kwargs"))
    values: dict[str, Any] = {}
    if params.get("extra_llm_api_options") is not None:
        try:
            values = config.load_config(params["extra_llm_api_options"], config.ArgsModels(facts.llm_args))
        except config.ConfigError as error:
            _fail(str(error))
    try:
        served = models.load_model(params["model"])
        joined = _join_world(params, values)
        settings = server.ServeSettings(
            host=params["host"],
            port=params["port"],
            served=served,
            # The YAML overwrites what the flags set (serve.py merges it last).
            max_batch_size=int(values.get("max_batch_size") or params["max_batch_size"]),
            return_perf_metrics=bool(values.get("return_perf_metrics", False)),
            video_frames=frames,
            media_policy=media.MediaPolicy.from_env(),
            delay_seconds=server.delay_from_env() or served.knobs.get("seconds_per_request", 0.0),
            world=joined,
        )
        server.serve_forever(settings, facts.metric_names)
    except models.ModelDirError as error:
        _fail(f"ValueError: {error}")
    except server.ServeError as error:
        _fail(f"RuntimeError: {error}")


def build(facts: Facts) -> click.Group:
    """The `trtllm-serve` group, its `serve` command built from `facts`."""

    def serve_callback(**params: Any) -> None:
        _run_serve(facts, params)

    serve = click.Command(
        SERVE,
        callback=serve_callback,
        params=[click.Argument([name]) for name in facts.arguments]
        + [click_option(o) for o in facts.options],
        help="Running an OpenAI API compatible server (the trtllm-serve double: no GPU, see "
        "docs/development/trtllm-serve-double.md)\n\n"
        "MODEL: model name | HF checkpoint path | TensorRT engine path",
    )

    def not_doubled(**_: Any) -> None:
        ctx = click.get_current_context()
        print(f"the trtllm-serve double implements `serve` only, not `{ctx.info_name}`", file=sys.stderr)
        ctx.exit(EXIT_USAGE)

    commands: dict[str, click.Command] = {SERVE: serve}
    for name in facts.subcommands:
        if name != SERVE:
            commands[name] = click.Command(
                name,
                callback=not_doubled,
                context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
                help="Not doubled.",
            )
    return DefaultGroup("trtllm-serve", commands=commands)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the double's command line (exits)."""
    build(load()).main(args=list(argv) if argv is not None else None, prog_name="trtllm-serve")
