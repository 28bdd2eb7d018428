"""`--dry-run` prints, for every example's plan, the argv the reference workflow documents; runs nothing."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from engine_builder.__main__ import main
from engine_builder.plan_format import WORK_DIR
from tests.engine_builder.conftest import EXAMPLES, rendered_plan
from tests.support.reference_workflow import REFERENCE_ARGV, flag_values


def dry_run(example: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    """Step name -> the argv the dry run printed for it."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(rendered_plan(example)))
    assert main(["build", "--plan", str(plan), "--cache-dir", str(tmp_path / "cache"), "--dry-run"]) == 0
    printed: dict[str, list[str]] = {}
    current = None
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("["):
            current = line.split("] ", 1)[1].split(":", 1)[0]
        elif line.startswith("  $ "):
            assert current is not None
            printed[current] = shlex.split(line.removeprefix("  $ "))
    return printed


@pytest.mark.parametrize("example", EXAMPLES)
def test_dry_run_prints_each_step_argv_exactly_and_touches_nothing(
    example: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = rendered_plan(example)
    printed = dry_run(example, tmp_path, capsys)
    work = str(tmp_path / "cache" / f".work-{plan['cache_key']}")
    assert printed == {
        step["name"]: [arg.replace(WORK_DIR, work) for arg in step["argv"]] for step in plan["steps"]
    }
    assert list(printed) == [step["name"] for step in plan["steps"]]
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("example", sorted(REFERENCE_ARGV))
def test_dry_run_argv_carries_every_flag_the_reference_workflow_documents(
    example: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    printed = dry_run(example, tmp_path, capsys)
    for step_name, (program, documented) in REFERENCE_ARGV[example].items():
        argv = printed[step_name]
        assert program in " ".join(argv[:2]), f"{step_name} runs {argv[:2]}, not {program}"
        emitted = flag_values(argv)
        for flag, value in flag_values(documented.split()).items():
            assert emitted.get(flag, "<absent>") == value, f"{example} {step_name}: {flag}"


def test_dry_run_says_what_a_build_would_refuse_and_names_secrets_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("ENGINE_BUILDER_ASSUME_TRTLLM_VERSION", raising=False)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(rendered_plan("mllama")))
    assert main(["build", "--plan", str(plan), "--cache-dir", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "a build here would refuse: tensorrt_llm is not installed here" in out
    assert "a build here would refuse: step fetch-model needs HF_TOKEN" in out
    assert "  environment from the Job: HF_TOKEN" in out
    assert "checks llm/config.json: version=0.19.0" in out
    assert f"cache entry {tmp_path}/{rendered_plan('mllama')['cache_key']}: absent" in out
