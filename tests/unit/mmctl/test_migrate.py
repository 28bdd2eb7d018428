"""`mmctl migrate` as a user runs it: the trtllm-serve equivalent of an engine resource, or why none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mmctl.main import main
from mmd_operator.api.validation import check_resource
from mmd_operator.knowledge import ModelType, Runtime, types_of
from mmd_operator.knowledge.engine_path import WAYS_OFF
from mmd_operator.plan.resource_plan import plan_resource
from tests.support.examples import ALL_EXAMPLE_PATHS, EXAMPLES_DIR

ENGINE_EXAMPLES = [path for path in ALL_EXAMPLE_PATHS if "runtime: trtllm-serve" not in path.read_text()]


def _migrated(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, str, str]:
    code = main(["migrate", *(argument for path in paths for argument in ("-f", str(path)))])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_engine_model_type_has_a_way_off_or_a_reason_and_the_tables_agree() -> None:
    """A type with a way off is served by trtllm-serve; a type without one is not (its reason says why)."""
    assert set(WAYS_OFF) == {ModelType(t) for t in types_of(Runtime.TRITON_TRTLLM_ENGINE)}
    served = set(types_of(Runtime.TRTLLM_SERVE))
    assert (
        {str(t) for t, way in WAYS_OFF.items() if way.to_serve}
        == set(WAYS_OFF) & served
        == {
            "qwen2_vl",
            "vila",
        }
    )


@pytest.mark.parametrize("path", ENGINE_EXAMPLES, ids=lambda path: path.stem)
def test_each_engine_example_is_printed_on_trtllm_serve_or_refused_with_the_reason(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = yaml.safe_load(path.read_text())
    way = WAYS_OFF[ModelType(source["spec"]["model"]["type"])]
    code, out, err = _migrated(capsys, path)
    if not way.to_serve:
        assert (code, out) == (1, "")
        assert f"has no trtllm-serve equivalent: {way.why}" in err and "frozen upstream" in err
        return
    assert (code, err) == (0, "")
    served: dict[str, Any] = yaml.safe_load(out)
    assert served["metadata"]["name"] == source["metadata"]["name"] + "-serve"
    assert served["spec"]["runtime"] == "trtllm-serve"
    assert served["spec"]["model"] == source["spec"]["model"]  # the same checkpoint
    _, problems = check_resource(served)
    assert problems == []
    plan_resource(served)  # and the operator plans it
    assert out.startswith("# the trtllm-serve equivalent of") and "OpenAI API" in out


def test_the_fields_left_out_are_named_with_what_they_belonged_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """From what `kubectl get -o yaml` prints: the server's fields go, and so do the engine's settings."""
    document = yaml.safe_load((EXAMPLES_DIR / "qwen2_vl.yaml").read_text())
    document["metadata"].update(
        uid="1234", resourceVersion="42", generation=3, namespace="ml",
        annotations={"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "vision"},
    )  # fmt: skip
    document["spec"]["engine"]["vision"] = {"maxBatchSize": 4}
    document["spec"]["serving"] = {"tritonMaxBatchSize": 4}
    document["status"] = {"phase": "Ready"}
    path = tmp_path / "live.yaml"
    path.write_text(yaml.safe_dump(document))
    code, out, err = _migrated(capsys, path)
    assert (code, err) == (0, "")
    served = yaml.safe_load(out)
    assert served["metadata"] == {
        "name": "qwen2-vl-serve",
        "namespace": "ml",
        "annotations": {"team": "vision"},
    }
    assert "status" not in served and "serving" not in served["spec"]
    assert served["spec"]["engine"] == {"maxBatchSize": 4, "maxSeqLen": 3072}
    left_out = out.split("Left out, with no meaning on trtllm-serve:")[1]
    for field in ("spec.engine.maxInputLen", "spec.engine.vision", "spec.serving.tritonMaxBatchSize"):
        assert f"#   {field}: a setting of" in left_out


def test_a_file_with_both_kinds_prints_the_one_and_refuses_the_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = tmp_path / "both.yaml"
    both.write_text(
        (EXAMPLES_DIR / "qwen2_vl.yaml").read_text() + "---\n" + (EXAMPLES_DIR / "blip2.yaml").read_text()
    )
    code, out, err = _migrated(capsys, both)
    assert code == 1
    assert [document["metadata"]["name"] for document in yaml.safe_load_all(out)] == ["qwen2-vl-serve"]
    assert "blip2: model type blip2 has no trtllm-serve equivalent" in err


def test_nothing_to_migrate_is_an_input_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _migrated(capsys, (EXAMPLES_DIR / "qwen2_vl-trtllm-serve.yaml"))
    assert (code, out) == (2, "")
    assert "no MultimodalDeployment on runtime triton-trtllm-engine" in err
