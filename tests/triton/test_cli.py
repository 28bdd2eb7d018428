"""`mmctl infer` and `mmctl eval-asr` against real tritonservers, including their bad-input paths."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import jiwer
import numpy as np
import pytest

from mmctl.main import main
from mmd_testbed.triton import media
from mmd_testbed.triton.doubles import codec
from mmd_testbed.triton.localserver import TritonInstall, free_ports
from mmd_testbed.triton.serving import Served, serve
from tests.triton.serving import load_example, load_example_with_urls


@pytest.fixture(scope="module")
def onevision(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Iterator[Served]:
    name = "llava_onevision"
    plan = load_example_with_urls(name)
    with serve(name, plan, triton_install, tmp_path_factory.mktemp("cli"), say) as server:
        yield server


@pytest.fixture(scope="module")
def whisper(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Iterator[Served]:
    with serve(
        "whisper", load_example("whisper"), triton_install, tmp_path_factory.mktemp("cli"), say
    ) as server:
        yield server


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_infer_image_url_over_grpc(
    onevision: Served, capsys: pytest.CaptureFixture[str], image_host: tuple[str, Path]
) -> None:
    base, root = image_host
    picture = media.image(root / "cli.jpg", (50, 40), seed=9)
    code, out, err = run(
        capsys, "infer", "--url", onevision.url("grpc"), "--text", "what", "--image", f"{base}/cli.jpg"
    )
    assert code == 0, err
    seen = codec.parse_digest(out.strip())
    assert seen["type"]["name"] == "llava_onevision"  # read from the server
    assert seen["pre"]["image_url"] == f"http#{codec.short_hash(picture.read_bytes())}:50x40"
    assert seen["pre"]["end_id"] == "151645"  # the knowledge table's end token
    assert "latency" in err and "ms" in err


def test_infer_local_image_over_http_generate(
    onevision: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    picture = media.image(tmp_path / "local.jpg", (16, 12))
    code, out, err = run(
        capsys, "infer", "--url", onevision.url("http"), "--image", str(picture), "--max-tokens", "7",
        "--temperature", "0.5", "--top-k", "3", "--seed", "11", "--prompt-table-extra-id", "5",
    )  # fmt: skip
    assert code == 0, err
    seen = codec.parse_digest(out.strip())
    assert seen["pre"]["image_url"] == f"data#{codec.short_hash(picture.read_bytes())}:16x12"
    llm = seen["llm"]
    assert (llm["request_output_len"], llm["temperature"], llm["runtime_top_k"]) == ("7", "0.5", "3")
    assert (llm["random_seed"], llm["prompt_table_extra_ids"]) == ("11", "5")


def test_infer_streams_video_and_uses_bls(
    onevision: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    clip = media.frames(tmp_path / "clip", 6)
    url = onevision.url("grpc")
    code, out, err = run(capsys, "infer", "--url", url, "--video", str(clip), "--frames", "3", "--stream")
    if not onevision.decoupled:
        assert code == 1 and "does not stream (deployed without serving.streaming)" in err
        code, out, err = run(capsys, "infer", "--url", url, "--video", str(clip), "--frames", "3")
        assert code == 0, err
        assert codec.parse_digest(out.strip())["pre"]["video"].startswith("3x24x32x3#")
    else:
        assert code == 0, err
        seen = codec.parse_digest(out.strip())
        assert seen["pre"]["video"].startswith("3x24x32x3#") and seen["llm"]["streaming"] == "1"
        assert "responses" in err  # streamed: several responses, first-response latency reported
    picture = media.image(tmp_path / "b.jpg")
    code, out, err = run(
        capsys, "infer", "--url", url, "--bls", "--image", str(picture), "--model-type", "llava_onevision"
    )
    assert code == 0, err
    assert "tensorrt_llm_bls" in err
    assert codec.parse_digest(out.strip())["pre"]["image_bytes"].startswith("1x48x64x3#")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--image", "/nonexistent.jpg"], "/nonexistent.jpg: no such file"),
        (["--image", "a.jpg", "--image", "b.jpg"], "takes one image per request"),
        (["--audio", "x.wav"], "does not accept audio"),
        (["--model-type", "whisper", "--audio", "{wav}"], "model 'whisper_bls' is not ready"),
        (["--video", "{clip}"], "--video needs --frames N"),
        (["--model-type", "llava", "--image", "{jpg}"], "does not accept image_input"),
    ],
)
def test_infer_bad_input(
    onevision: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    values = {
        "wav": str(media.speech(tmp_path / "a.wav", "a")),
        "clip": str(media.frames(tmp_path / "clip", 2)),
        "jpg": str(media.image(tmp_path / "c.jpg")),
    }
    argv = [a.format(**values) for a in args]
    code, out, err = run(capsys, "infer", "--url", onevision.url("grpc"), *argv)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and message in err, err


def test_infer_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    (port,) = free_ports(1)
    for scheme in ("http", "grpc"):
        code, out, err = run(capsys, "infer", "--url", f"{scheme}://127.0.0.1:{port}", "--timeout", "5")
        assert code == 1 and out == ""
        # Refused: never reached a server, so connected again (3 times by default), each try said.
        *tries, last = err.splitlines()
        assert [line.endswith(f"trying again ({n} of 3)") for n, line in enumerate(tries, 1)] == [True] * 3, (
            err
        )
        assert last.startswith("mmctl infer: cannot reach tritonserver"), err


def test_infer_transcribes_audio(whisper: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    wav = media.speech(tmp_path / "s.wav", "good morning", rate=22050, channels=2)
    code, out, err = run(capsys, "infer", "--url", whisper.url("grpc"), "--audio", str(wav))
    assert code == 0, err
    assert out.strip() == "good morning"  # resampled from 22.05 kHz stereo, pitch intact


def test_eval_asr(whisper: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    texts = ["hello world", "a cab", "bad dog barks", "quiet please"]
    lines = []
    for index, text in enumerate(texts):
        rate = 8000 if index == 1 else 16000  # one file needs resampling
        wav = media.speech(tmp_path / f"u{index}.wav", text, rate=rate)
        lines.append(json.dumps({"audio_filepath": wav.name, "text": text.capitalize() + "."}))
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    output = tmp_path / "hyp.jsonl"
    code, out, err = run(
        capsys, "eval-asr", "--url", whisper.url("grpc"), "--manifest", str(manifest), "--concurrency", "2",
        "--output", str(output),
    )  # fmt: skip
    assert code == 0, err
    assert "WER 0.00%  CER 0.00%" in out and "utterances 4" in out
    assert "transcribing" in err and "4/4" in err  # the progress bar
    assert [json.loads(line)["hyp"] for line in output.read_text().splitlines()] == texts
    # Wrong references: the scores are jiwer's over the normalised texts.
    references = ["hello word", "a cab", "bad dog barked", "quiet please"]
    tsv = tmp_path / "manifest.tsv"
    tsv.write_text("".join(f"u{i}.wav\t{ref}\n" for i, ref in enumerate(references)))
    code, out, err = run(capsys, "eval-asr", "--url", whisper.url("http"), "--manifest", str(tsv))
    expected_wer = jiwer.wer(references, texts) * 100
    expected_cer = jiwer.cer(references, texts) * 100
    if whisper.decoupled:
        # Decoupled whisper_bls answers only streams, and HTTP's generate endpoint carries no WAV.
        assert code == 1 and "generate endpoint carries no WAV tensor" in err
        code, out, err = run(capsys, "eval-asr", "--url", whisper.url("grpc"), "--manifest", str(tsv))
    assert code == 0, err
    assert f"WER {expected_wer:.2f}%  CER {expected_cer:.2f}%" in out


def test_eval_asr_bad_input(whisper: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = whisper.url("grpc")
    long_wav = tmp_path / "long.wav"
    import soundfile

    soundfile.write(long_wav, np.zeros(31 * 16000, dtype=np.float32), 16000)
    (tmp_path / "long.jsonl").write_text(json.dumps({"audio": "long.wav", "text": "x"}) + "\n")
    (tmp_path / "missing.jsonl").write_text(json.dumps({"audio": "nope.wav", "text": "x"}) + "\n")
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    cases = [
        (tmp_path / "absent.jsonl", "no such manifest"),
        (tmp_path / "missing.jsonl", "nope.wav: no such file"),
        (tmp_path / "broken.jsonl", "broken.jsonl:1: not valid JSON"),
        (
            tmp_path / "long.jsonl",
            "long.wav: 31.0 s of audio is 3100 mel frames; Whisper's encoder takes at most 3000 (30 s)",
        ),
    ]
    for manifest, message in cases:
        code, out, err = run(capsys, "eval-asr", "--url", url, "--manifest", str(manifest))
        assert code == 1 and out == ""
        assert err.count("\n") == 1 and message in err, err
