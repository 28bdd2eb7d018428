"""`mmctl chat` end to end against the double: once as the real program, then through its entry point in
this process (the same parser, SDK and HTTP; `mmctl` imports every sub-command, which takes seconds)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmctl import main
from testbed.tests.trtllm_serve.double import Double

FAILED = 1


def _mmctl_chat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mmctl.main", "chat", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OPENAI_API_KEY": ""},
        check=False,
    )


def _chat(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main.main(["chat", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_program_sends_an_image_file_inline(qwen: Double, media_dir: Path) -> None:
    result = _mmctl_chat("--url", qwen.url, "--image", str(media_dir / "cat.png"), "--text", "What is this?")
    assert result.returncode == 0, result.stderr
    assert "image 1: 64x48, mean colour #" in result.stdout
    assert result.stdout.strip().endswith("prompt: What is this?")
    assert "finish: stop; model: Qwen2.5-VL-3B-Instruct" in result.stderr  # the first model /v1/models lists
    assert "usage: " in result.stderr


def test_streaming_a_url_image_and_a_video(
    qwen: Double, file_host: str, media_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _chat(
        capsys,
        "--url",
        f"{qwen.url}/v1",
        "--model",
        "qwen",
        "--stream",
        "--max-tokens",
        "64",
        "--image",
        f"{file_host}/cat.png",
        "--video",
        str(media_dir / "clip.gif"),
    )
    assert code == 0, err
    assert "image 1: 64x48" in out and "video 1: 4 frames of 32x24" in out
    assert "finish: stop; model: qwen" in err


def test_a_data_url_and_audio_to_phi4mm(
    phi4mm: Double, media_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_url = "data:image/png;base64," + base64.b64encode((media_dir / "cat.png").read_bytes()).decode()
    code, out, err = _chat(
        capsys,
        "--url",
        phi4mm.url,
        "--image",
        data_url,
        "--audio",
        str(media_dir / "hello.wav"),
        "--text",
        "",
    )
    assert code == 0, err
    assert "image 1: 64x48" in out and "at 16000 Hz" in out
    assert "no prompt." in out


def test_refusals_and_bad_input_are_one_line_and_exit_1(
    gemma: Double, media_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _chat(capsys, "--url", gemma.url, "--video", str(media_dir / "clip.gif"))
    assert code == FAILED
    assert err.strip() == "mmctl chat: the server refused the request (HTTP 400): Unknown modality: video"
    code, _, err = _chat(capsys, "--url", gemma.url, "--image", str(media_dir / "nope.png"))
    assert code == FAILED and "nope.png: no such file" in err
    code, _, err = _chat(capsys, "--url", "http://127.0.0.1:9", "--model", "m", "--timeout", "5")
    assert code == FAILED and "cannot reach http://127.0.0.1:9" in err
