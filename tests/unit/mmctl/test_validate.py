"""`mmctl validate` as CI runs it: over a directory of the examples and the bad-input catalogue, several
documents per file, other kinds skipped, stdin, `-o json`, `--strict`, and the exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmctl.main import main
from tests.support.bad_inputs import CASES
from tests.support.examples import EXAMPLES_DIR

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OFFLINE = [case for case in CASES if case.offline]
REVISION = "spec.model.source.huggingface.revision"
HUB_EXAMPLES = sorted(
    p.name
    for p in EXAMPLES_DIR.glob("*.yaml")
    if "huggingface" in yaml.safe_load(p.read_text())["spec"]["model"]["source"]
)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    code = main(["validate", *args])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["validate", "-o", "json", *args])
    return code, json.loads(capsys.readouterr().out)


def _first_key_line(path: Path) -> int:
    """The line of the first key of the file's first document (comments and `---` before it)."""
    lines = path.read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if line and not line.startswith(("#", "---")))


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A GitOps-like tree: the examples in a nested directory, a two-document file with a Service,
    a kustomization, a README and a hidden directory."""
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLES_DIR, root / "apps" / "examples")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "front"},
        "spec": {"ports": [{"port": 80}]},
    }
    pinned = yaml.safe_load((EXAMPLES_DIR / "llava.yaml").read_text())
    pinned["metadata"] = {"name": "llava-pinned", "namespace": "ml"}
    pinned["spec"]["model"]["source"]["huggingface"]["revision"] = COMMIT
    (root / "apps" / "both.yml").write_text(yaml.safe_dump_all([service, pinned]))
    (root / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
    )
    (root / "README.md").write_text("# not read\n")
    (root / ".git").mkdir()
    (root / ".git" / "broken.yaml").write_text("{{ not read }}\n")
    return root


def test_a_directory_is_searched_recursively_and_other_kinds_are_counted(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "-f", str(repository))
    assert code == 0 and err == ""
    # Every example, and the pinned llava of both.yml; each example from the Hub warns of its revision.
    every, warned = len(list(EXAMPLES_DIR.glob("*.yaml"))) + 1, len(HUB_EXAMPLES)
    counts = f"{every} resources: {every - warned} ok, {warned} with warnings, 0 invalid"
    assert out[-1] == f"{counts}; 2 other documents skipped"
    # file:N is the line the document starts on, as editors and CI annotators read it.
    both = (repository / "apps" / "both.yml").read_text().splitlines()
    assert f"{repository}/apps/both.yml:{both.index('---') + 2} ml/llava-pinned ok" in out
    llava = f"{repository}/apps/examples/llava.yaml:{_first_key_line(EXAMPLES_DIR / 'llava.yaml')}"
    assert f"{llava} llava 1 warning" in out
    warning = out[out.index(f"{llava} llava 1 warning") + 1]
    assert warning.startswith(f'  warning: {REVISION}: is "main", not a 40-character commit hash')
    lora = EXAMPLES_DIR / "internlm-xcomposer2-lora.yaml"
    assert (
        f"{repository}/apps/examples/{lora.name}:{_first_key_line(lora)} internlm-xcomposer2-lora ok" in out
    )
    # Strict: every warning is an error.
    code, out, _ = _run(capsys, "--strict", "-f", str(repository))
    assert code == 1
    counts = f"{every} resources: {every - warned} ok, 0 with warnings, {warned} invalid"
    assert out[-1] == f"{counts}; 2 other documents skipped"
    assert f"{llava} llava 1 error" in out


def test_every_offline_case_of_the_bad_input_catalogue_is_invalid_with_its_path_and_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalogue = tmp_path / "catalogue.yaml"
    catalogue.write_text(yaml.safe_dump_all([case.document for case in OFFLINE]))
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(yaml.safe_dump_all([case.fixed for case in OFFLINE]))
    code, report = _json(capsys, "-f", str(catalogue), "-f", str(fixed))
    assert code == 1 and report["exitCode"] == 1
    broken, mended = report["resources"][: len(OFFLINE)], report["resources"][len(OFFLINE) :]
    for case, found in zip(OFFLINE, broken, strict=True):
        assert found["verdict"] == "invalid" and found["name"] == case.name
        problems = [f"{error['path']}: {error['message']}" for error in found["errors"]]
        assert any(p.startswith(f"{case.path}: ") and case.fragment in p for p in problems), (
            case.id,
            problems,
        )
    assert [found["errors"] for found in mended] == [[]] * len(OFFLINE)
    assert report["summary"]["invalid"] == len(OFFLINE) and report["summary"]["resources"] == 2 * len(OFFLINE)


def test_the_text_report_has_one_line_per_resource_and_the_problems_indented(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = yaml.safe_load((EXAMPLES_DIR / "llava.yaml").read_text())
    bad["metadata"]["namespace"] = "ml"
    bad["spec"]["engine"]["maxMultimodalLen"] = 4000
    bad["spec"]["serving"] = {"crossKvCacheFraction": 0.5, "replicas": 2}
    bad["spec"]["engineCache"] = {"accessMode": "ReadWriteOnce"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    code, out, _ = _run(capsys, "-f", str(path))
    assert code == 1
    assert out[0] == f"{path}:1 ml/llava 2 errors, 2 warnings"
    assert out[1].startswith("  spec.engine.maxMultimodalLen: is 4000 but must equal")
    assert out[2].startswith("  spec.serving.crossKvCacheFraction: crossKvCacheFraction must not be set")
    assert out[3].startswith(
        "  warning: spec.engineCache.accessMode: is ReadWriteOnce, which attaches the claim"
    )
    assert out[4].startswith(f"  warning: {REVISION}: ")
    assert out[5] == "1 resource: 0 ok, 0 with warnings, 1 invalid; 0 other documents skipped"


def test_the_json_report_has_a_stable_shape(repository: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _json(
        capsys,
        "-f",
        str(repository / "apps" / "both.yml"),
        "-f",
        str(repository / "apps" / "examples" / "llava.yaml"),
    )
    assert code == 0
    assert set(report) == {"resources", "skipped", "unreadable", "summary", "strict", "exitCode"}
    pinned, llava = report["resources"]
    assert pinned == {
        "file": f"{repository}/apps/both.yml",
        "document": 2,
        "line": pinned["line"],
        "namespace": "ml",
        "name": "llava-pinned",
        "verdict": "ok",
        "errors": [],
        "warnings": [],
        "notes": [],
        "cacheKey": pinned["cacheKey"],
        "podResources": pinned["podResources"],
    }
    assert pinned["line"] > 1 and len(pinned["cacheKey"]) == 20
    # The build pod's and the serving pod's CPU and memory, derived (the spec sets none).
    build, serving = pinned["podResources"]
    assert (build["pod"], build["container"], serving["pod"], serving["container"]) == (
        "Build",
        "engine-builder",
        "Serving",
        "tritonserver",
    )
    assert set(serving["requests"]) == {"cpu", "memory"} and set(serving["limits"]) == {"memory"}
    assert serving["limits"]["memory"] == serving["requests"]["memory"] and serving["fromSpec"] == []
    assert serving["basis"].startswith(f"derived {serving['limits']['memory']}: (tritonserver rank 3Gi + ")
    assert llava["verdict"] == "warnings" and llava["namespace"] is None
    assert [(w["rule"], w["path"]) for w in llava["warnings"]] == [("model-revision-not-a-commit", REVISION)]
    assert report["skipped"] == [
        {
            "file": f"{repository}/apps/both.yml",
            "document": 1,
            "line": 1,
            "apiVersion": "v1",
            "kind": "Service",
        }
    ]
    assert report["summary"] == {
        "resources": 2,
        "ok": 1,
        "warnings": 1,
        "invalid": 0,
        "skipped": 1,
        "unreadable": 0,
    }
    code, strict = _json(capsys, "--strict", "-f", str(repository / "apps" / "examples" / "llava.yaml"))
    assert code == 1 and strict["strict"] is True
    (error,) = strict["resources"][0]["errors"]
    assert error["rule"] == "model-revision-not-a-commit" and error["path"] == REVISION


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "no such file or directory"),
        ("spec: [unclosed", "not valid YAML: expected ',' or ']'"),
        (b"\xff\xfe", "not UTF-8 text"),
    ],
    ids=["missing", "not-yaml", "not-text"],
)
def test_an_unreadable_input_exits_2_and_the_others_are_still_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes | None, says: str
) -> None:
    broken = tmp_path / "broken.yaml"
    if isinstance(content, bytes):
        broken.write_bytes(content)
    elif content is not None:
        broken.write_text(content)
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(
        "apiVersion: serving.multimodal.dev/v1alpha1\nkind: MultimodalDeployment\n"
        "metadata: {name: x}\nspec: {}\n"
    )
    code, out, err = _run(capsys, "-f", str(broken), "-f", str(invalid))
    assert code == 2
    assert err.startswith(f"{broken}") and says in err
    assert out[0] == f"{invalid}:1 x 1 error" and out[1] == "  spec.model: required field is missing"
    assert out[-1].endswith("; 1 input error")


def test_documents_before_a_yaml_error_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "two.yaml"
    path.write_text((EXAMPLES_DIR / "internlm-xcomposer2-lora.yaml").read_text() + "---\nspec: [\n")
    code, report = _json(capsys, "-f", str(path))
    assert code == 2 and [r["verdict"] for r in report["resources"]] == ["ok"]
    (unreadable,) = report["unreadable"]
    lines = len(path.read_text().splitlines())
    assert unreadable.startswith(f"{path}:{lines + 1}:1: not valid YAML: ")


def test_mmctl_validate_reads_stdin_with_several_documents() -> None:
    mmctl = shutil.which("mmctl", path=str(Path(sys.executable).parent))
    assert mmctl is not None
    text = "---\n".join(
        (EXAMPLES_DIR / name).read_text() for name in ("internlm-xcomposer2-lora.yaml", "vila.yaml")
    )
    result = subprocess.run(
        [mmctl, "validate", "-f", "-"], input=text, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    first = _first_key_line(EXAMPLES_DIR / "internlm-xcomposer2-lora.yaml")
    second = text.splitlines().index("---", first) + 1 + _first_key_line(EXAMPLES_DIR / "vila.yaml")
    assert lines[0] == f"<stdin>:{first} internlm-xcomposer2-lora ok"
    # Each valid resource's pods, one line each: what the scheduler reserves and the kernel enforces.
    assert lines[1].startswith("  resources: build pod (engine-builder): requests cpu 2, memory ")
    assert lines[2].startswith("  resources: serving pod (tritonserver): requests cpu 1500m, memory ")
    assert lines[3] == f"<stdin>:{second} vila 1 warning"
    assert lines[-1] == "2 resources: 1 ok, 1 with warnings, 0 invalid; 0 other documents skipped"
    strict = subprocess.run(
        [mmctl, "validate", "--strict", "-f", "-"], input=text, capture_output=True, text=True, check=False
    )
    assert strict.returncode == 1


def test_every_example_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _json(capsys, "-f", str(EXAMPLES_DIR))
    assert code == 0
    assert (
        sorted(Path(r["file"]).name for r in report["resources"] if r["verdict"] == "warnings")
        == HUB_EXAMPLES
    )
    assert all(r["errors"] == [] for r in report["resources"])
