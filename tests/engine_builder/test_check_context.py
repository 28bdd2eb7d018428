"""The build's `check-context` step: a maxSeqLen beyond the checkpoint's positions fails before GPU work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine_builder.steps import StepError, check_context, main


def _config(tmp_path: Path, document: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(document))
    return path


def test_a_length_within_the_positions_passes(tmp_path: Path) -> None:
    config = _config(tmp_path, {"text_config": {"max_position_embeddings": 4096}})
    assert check_context(config, 4096) == f"maxSeqLen 4096 is within the 4096 positions of {config}"


def test_a_length_beyond_them_is_refused_naming_both_and_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, {"max_position_embeddings": 4096, "model_type": "llama"})
    with pytest.raises(StepError, match="maxSeqLen 262144 is beyond the 4096 positions of the checkpoint"):
        check_context(config, 262144)
    assert main(["check-context", "--config", str(config), "--max-seq-len", "262144"]) == 1
    error = capsys.readouterr().err
    assert (
        error.startswith("error: maxSeqLen 262144 is beyond")
        and "spec.engine.maxSeqLen to at most 4096" in error
    )


def test_rope_scaling_makes_it_a_warning(tmp_path: Path) -> None:
    scaling = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    config = _config(tmp_path, {"llm_config": {"max_position_embeddings": 32768, "rope_scaling": scaling}})
    said = check_context(config, 131072)
    assert said.startswith("warning: maxSeqLen 131072 is beyond the 32768 positions")
    assert '"type": "yarn"' in said


@pytest.mark.parametrize("document", [{"model_type": "llama"}, None])
def test_a_config_that_says_nothing_is_not_checked(
    tmp_path: Path, document: dict[str, object] | None
) -> None:
    config = _config(tmp_path, document) if document is not None else tmp_path / "config.json"
    assert check_context(config, 1_000_000).endswith("maxSeqLen 1000000 not checked")
