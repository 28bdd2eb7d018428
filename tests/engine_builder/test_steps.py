"""Our own steps, run as the plans run them: `python3 -m engine_builder.steps ...`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.engine_builder.conftest import write_whisper_package
from tests.engine_builder.doubles.trtllm_tools import write_model_repo


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
