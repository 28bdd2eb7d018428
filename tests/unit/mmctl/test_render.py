"""`mmctl render` as a user runs it (`mmctl validate`: test_cli_validate.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mmctl.main import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_render_writes_repository_derived_plan_and_launch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = out_path(tmp_path)
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
        ".mmctl-rendered",
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
    printed = capsys.readouterr().out.splitlines()
    assert derived["cache_key"] in printed[1]
    # One line per kind of pod, what it asks for (as status.podResources), then every file once; the
    # list the output directory keeps is the same.
    assert (
        printed[2]
        == "  resources    build pod (engine-builder): requests cpu 2, memory 27Gi; limits memory 27Gi"
    )
    assert (
        printed[3]
        == "  resources    serving pod (tritonserver): requests cpu 2, memory 20Gi; limits memory 20Gi"
    )
    listed = [line.strip() for line in printed[4:]]
    assert listed == sorted(set(listed)) == sorted(set(written + manifests) - {".mmctl-rendered"})
    assert (out / ".mmctl-rendered").read_text().split() == listed


def out_path(tmp_path: Path) -> Path:
    return tmp_path / "out"


def _files(out: Path) -> set[str]:
    return {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}


def test_render_again_leaves_only_what_it_wrote_and_every_file_of_the_users(tmp_path: Path) -> None:
    out = out_path(tmp_path)
    assert main(["render", "-f", str(EXAMPLES / "llava.yaml"), "-o", str(out)]) == 0
    # The user's own files, beside and inside what mmctl writes.
    (out / "notes.md").write_text("mine\n")
    (out / "model_repository" / "README").write_text("mine\n")
    (out / "manifests" / "kustomization.yaml").write_text("resources: []\n")
    assert main(["render", "-f", str(EXAMPLES / "whisper.yaml"), "-o", str(out)]) == 0
    assert sorted(p.name for p in (out / "model_repository").iterdir()) == [
        "README",
        "tensorrt_llm",
        "whisper_bls",
    ]
    # Another runtime: its files, the user's, and nothing of the earlier renders.
    assert main(["render", "-f", str(EXAMPLES / "qwen2_5_vl.yaml"), "-o", str(out)]) == 0
    ours = set((out / ".mmctl-rendered").read_text().split())
    assert _files(out) == ours | {
        ".mmctl-rendered",
        "notes.md",
        "model_repository/README",
        "manifests/kustomization.yaml",
    }
    assert not any(name.startswith("model_repository/") for name in ours)
    assert "build_plan.json" not in ours and "download_plan.json" in ours
    # Directories left empty by the removal are gone; one holding a file of the user's stays.
    assert sorted(p.name for p in (out / "model_repository").iterdir()) == ["README"]


def test_a_list_that_points_outside_the_output_directory_is_not_followed(tmp_path: Path) -> None:
    out = out_path(tmp_path)
    outside = tmp_path / "precious.txt"
    outside.write_text("keep\n")
    out.mkdir()
    (out / ".mmctl-rendered").write_text("../precious.txt\n")
    assert main(["render", "-f", str(EXAMPLES / "llava.yaml"), "-o", str(out)]) == 0
    assert outside.read_text() == "keep\n"


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_rendered_manifests_have_no_yaml_anchors(tmp_path: Path, example: str) -> None:
    out = out_path(tmp_path)
    assert main(["render", "-f", str(EXAMPLES / example), "-o", str(out)]) == 0
    for path in out.rglob("*.yaml"):
        events = list(yaml.parse(path.read_text()))
        anchored = [e for e in events if getattr(e, "anchor", None) is not None]
        assert not anchored, (path.name, anchored[:3])


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
        (None, "no such file or directory"),
        ("", "nothing to check: the file is empty"),
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
