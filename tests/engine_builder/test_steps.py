"""Our own steps, run as the plans run them: `python3 -m engine_builder.steps ...`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mmd_testbed import build_tools
from mmd_testbed.build_tools.toolbox import write_whisper_package
from mmd_testbed.build_tools.trtllm_tools import write_model_repo


def steps(*args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", **({"PYTHONPATH": str(pythonpath)} if pythonpath else {})}
    return subprocess.run(
        [sys.executable, "-m", "engine_builder.steps", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_keep_tokenizer_copies_what_serving_reads_and_no_weights(tmp_path: Path) -> None:
    source, dest = tmp_path / "vila1.5-3b", tmp_path / "tokenizer"
    write_model_repo(source, "Efficient-Large-Model/vila1.5-3b")
    (source / "modeling_internlm_xcomposer2.py").write_text("# remote code\n")
    (source / "chat_template.jinja").write_text("{{ messages }}\n")
    (source / "qwen.tiktoken").write_text("IQ== 0\n")

    result = steps("keep-tokenizer", "--source", str(source), "--dest", str(dest))

    assert result.returncode == 0, result.stderr
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "chat_template.jinja",
        "config.json",
        "llm/config.json",
        "llm/tokenizer.model",
        "merges.txt",
        "model.safetensors.index.json",
        "modeling_internlm_xcomposer2.py",
        "preprocessor_config.json",
        "qwen.tiktoken",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer.model",
        "tokenizer_config.json",
    ]
    assert (dest / "tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()
    assert result.stdout == f"kept 13 tokenizer, processor and config files of {source} in {dest}\n"


def test_keep_tokenizer_refuses_a_directory_that_is_not_a_model(tmp_path: Path) -> None:
    result = steps("keep-tokenizer", "--source", str(tmp_path), "--dest", str(tmp_path / "out"))
    assert result.returncode == 1
    assert result.stderr == f"error: {tmp_path} has no config.json: not a model directory\n"
    assert not (tmp_path / "out").exists()


def test_whisper_assets_come_from_the_openai_whisper_package(tmp_path: Path) -> None:
    write_whisper_package(tmp_path / "site")
    dest = tmp_path / "assets"
    result = steps("whisper-assets", "--dest", str(dest), pythonpath=tmp_path / "site")
    assert result.returncode == 0, result.stderr
    for name in ("multilingual.tiktoken", "mel_filters.npz"):
        assert (dest / name).read_bytes() == (tmp_path / "site" / "whisper" / "assets" / name).read_bytes()


def test_whisper_assets_fail_clearly_without_the_package_or_with_the_wrong_one(tmp_path: Path) -> None:
    result = steps("whisper-assets", "--dest", str(tmp_path / "a"), pythonpath=tmp_path)
    assert result.returncode == 1
    assert result.stderr == (
        "error: the openai-whisper package is not installed; "
        "it ships multilingual.tiktoken and mel_filters.npz\n"
    )
    # Another package named `whisper` (Graphite's) is not the one with the assets.
    (tmp_path / "whisper").mkdir()
    (tmp_path / "whisper" / "__init__.py").write_text("")
    result = steps("whisper-assets", "--dest", str(tmp_path / "a"), pythonpath=tmp_path)
    assert result.returncode == 1
    assert "lacks multilingual.tiktoken, mel_filters.npz: not the openai-whisper package" in result.stderr
    # A mel filter bank without the 128-bin filters would break large-v3 at serving time.
    assets = tmp_path / "whisper" / "assets"
    assets.mkdir()
    (assets / "multilingual.tiktoken").write_text("IQ== 0\n")
    import numpy as np

    np.savez(assets / "mel_filters.npz", mel_80=np.zeros((80, 201), np.float32))
    result = steps("whisper-assets", "--dest", str(tmp_path / "a"), pythonpath=tmp_path)
    assert result.returncode == 1
    assert result.stderr.endswith("mel_filters.npz lacks ['mel_128.npy']\n")


DOUBLES = Path(build_tools.__file__).resolve().parent


def _vision_step(
    tmp_path: Path, *, env: dict[str, str] | None = None, model_type: str = "internlm-xcomposer2-vl-7b"
) -> tuple[subprocess.CompletedProcess[str], Path]:
    site = tmp_path / "site"
    (site / "tensorrt").mkdir(parents=True, exist_ok=True)
    (site / "tensorrt" / "__init__.py").write_text((DOUBLES / "tensorrt_runtime.py").read_text())
    model = tmp_path / "hf" / "internlm-xcomposer2-vl-7b"
    write_model_repo(model, "internlm/internlm-xcomposer2-vl-7b")
    out = tmp_path / "work" / "encoder"
    result = subprocess.run(
        [
            sys.executable, "-m", "engine_builder.steps", "xcomposer2-vision-engine",
            "--recipe", str(DOUBLES / "xcomposer2_recipe.py"), "--model-type", model_type,
            "--model-dir", str(model), "--output-dir", str(out), "--max-batch-size", "48",
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), **(env or {})},
        cwd=tmp_path,
        check=False,
    )  # fmt: skip
    return result, out


def test_xcomposer2_vision_plan_comes_from_the_fork_recipe_and_the_fetched_checkpoint(
    tmp_path: Path,
) -> None:
    result, out = _vision_step(tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"built {out / 'visual_encoder.engine'} (tensors input and output)" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "visual_encoder.engine"]
    assert '"model_type": "internlm/internlm-xcomposer2-vl-7b"' in (out / "config.json").read_text()
    # The recipe ran offline and in a scratch directory: nothing is left where the step was started.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "site", "work"]


def test_xcomposer2_vision_plan_with_other_tensor_names_is_refused(tmp_path: Path) -> None:
    result, out = _vision_step(tmp_path, env={"DOUBLE_VISION_TENSORS": "input,encoder_output"})
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: {out / 'visual_encoder.engine'} has tensors ['input', 'encoder_output']; the "
        "InternLM-XComposer2 preprocessing needs exactly input and output"
    )


def test_xcomposer2_vision_step_fails_clearly_without_the_recipe(tmp_path: Path) -> None:
    result = steps(
        "xcomposer2-vision-engine", "--recipe", str(tmp_path / "absent.py"), "--model-type", "x",
        "--model-dir", str(tmp_path), "--output-dir", str(tmp_path / "out"), "--max-batch-size", "1",
    )  # fmt: skip
    assert result.returncode == 1
    assert "absent.py is missing: the builder image carries the pinned fork recipe there" in result.stderr


def test_a_recipe_failure_reaches_the_builder_as_one_line(tmp_path: Path) -> None:
    result, _ = _vision_step(tmp_path, env={"DOUBLE_FAIL": "build_visual_engine"})
    assert result.returncode != 0
    assert "Failed building visual_encoder.engine" in result.stderr.splitlines()[-1]
