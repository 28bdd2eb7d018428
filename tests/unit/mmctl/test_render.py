"""`mmctl render` as a user runs it (`mmctl validate`: test_cli_validate.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mmctl.main import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_render_writes_repository_derived_plan_and_launch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["render", "-f", str(EXAMPLES / "vila.yaml"), "-o", str(out)]) == 0
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    manifests = [name for name in written if name.startswith("manifests/")]
    assert [name.split("-", 1)[0] for name in manifests] == [
        "manifests/configmap",
        "manifests/deployment",
        "manifests/job",
        "manifests/persistentvolumeclaim",
        "manifests/service",
    ]
    written = [name for name in written if name not in manifests]
    assert written == [
        "build_plan.json",
        "derived.json",
        "launch.json",
        *[
            f"model_repository/{model}/{name}"
            for model in sorted(
                [
                    "ensemble",
                    "multimodal_encoders",
                    "postprocessing",
                    "preprocessing",
                    "tensorrt_llm",
                    "tensorrt_llm_bls",
                ]
            )
            for name in ("1/.keep", "config.pbtxt")
        ],
    ]
    derived = json.loads((out / "derived.json").read_text())
    assert derived["max_multimodal_len"] == 6272
    assert derived["vision_max_batch_size"] == 32
    assert len(derived["cache_key"]) == 20
    assert json.loads((out / "launch.json").read_text())["world_size"] == 1
    assert json.loads((out / "build_plan.json").read_text())["cache_key"] == derived["cache_key"]
    assert derived["cache_key"] in capsys.readouterr().out


def test_render_again_replaces_an_earlier_repository(tmp_path: Path) -> None:
    assert main(["render", "-f", str(EXAMPLES / "llava.yaml"), "-o", str(tmp_path)]) == 0
    assert main(["render", "-f", str(EXAMPLES / "whisper.yaml"), "-o", str(tmp_path)]) == 0
    assert sorted(p.name for p in (tmp_path / "model_repository").iterdir()) == [
        "tensorrt_llm",
        "whisper_bls",
    ]


def test_invalid_resource_lists_every_problem_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (EXAMPLES / "llava.yaml").read_text()
        + "    maxMultimodalLen: 4000\n  serving:\n    crossKvCacheFraction: 0.5\n"
    )
    out = tmp_path / "out"
    assert main(["render", "-f", str(bad), "-o", str(out)]) == 1
    assert not out.exists()
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"{bad}: invalid MultimodalDeployment (2 problems)"
    assert err[1].startswith("  spec.engine.maxMultimodalLen: is 4000 but must equal")
    assert err[2].startswith("  spec.serving.crossKvCacheFraction: crossKvCacheFraction must not be set")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("spec: [unclosed", "not valid YAML"),
        ("a: 1\n---\nb: 2\n", "expected exactly one MultimodalDeployment document, found 2"),
        ("- just\n- a list\n", "expected exactly one MultimodalDeployment document"),
    ],
)
def test_unreadable_input_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "input.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["render", "-f", str(path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_mmctl_program_reads_stdin(tmp_path: Path) -> None:
    mmctl = shutil.which("mmctl", path=str(Path(sys.executable).parent))
    assert mmctl is not None
    result = subprocess.run(
        [mmctl, "render", "-f", "-", "-o", str(tmp_path)],
        input=(EXAMPLES / "mllama.yaml").read_text(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "model_repository" / "multimodal_encoders" / "config.pbtxt").exists()
