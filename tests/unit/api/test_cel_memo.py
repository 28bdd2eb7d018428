"""The CEL rules' verdicts are remembered by what each rule reads, and never mixed up between specs.

Planning a new spec evaluates every rule of the CRD in cel-python; specs that differ in a field or two
share the verdicts of the rules that do not read those fields. These check the read paths found in the
rules' text and that a remembered verdict is only reused for a value the rule sees the same way.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from mmd_operator.api import validation
from mmd_operator.api.validation import check_spec, projection, read_paths

LLAVA = yaml.safe_load((Path(__file__).resolve().parents[3] / "examples" / "llava.yaml").read_text())["spec"]


@pytest.mark.parametrize(
    ("expression", "paths"),
    [
        ("self.maxSeqLen > self.maxInputLen", [(False, ("maxInputLen",)), (False, ("maxSeqLen",))]),
        ("has(self.e.v) && self.e.v.n > 1", [(False, ("e", "v", "n")), (True, ("e", "v"))]),
        ("!self.path.contains('..')", [(False, ("path",))]),  # a method is not a field
        ("self.models.all(m, m.x > 0)", [(False, ("models",))]),  # a macro reads the whole list
        ("isQuantity(string(self))", [(False, ())]),  # all of it
        ("self.a[0].b == oldSelf.a", [(False, ("a",))]),  # an index: all of `a`; `oldSelf` is not `self`
        ("self . a . b == 1", [(False, ("a", "b"))]),
        ("has(self.a.b.c) || has(self.a)", [(True, ("a",)), (True, ("a", "b", "c"))]),
    ],
)
def test_the_paths_a_rule_reads_are_found_in_its_text(
    expression: str, paths: list[tuple[bool, tuple[str, ...]]]
) -> None:
    assert list(read_paths("self", expression)) == paths


def test_a_projection_tells_a_missing_key_from_a_missing_map_and_from_a_value() -> None:
    paths = ((False, ("engine", "vision")),)
    assert projection({"engine": {}}, paths) != projection({}, paths)  # `has()` of one, an error of the other
    assert projection({"engine": "x"}, paths) != projection({"engine": {}}, paths)
    assert projection({"engine": {"vision": None}}, paths) != projection({"engine": {}}, paths)
    assert projection({"engine": {"vision": 1}, "other": 1}, paths) == projection(
        {"engine": {"vision": 1}}, paths
    )
    assert projection({"a": 1}, [(False, ("a",))]) != projection({"a": 1.0}, [(False, ("a",))])  # int, double


def test_a_has_reads_only_whether_the_field_is_there() -> None:
    present = [(True, ("spec", "engine"))]
    assert projection({"spec": {"engine": {"a": 1}}}, present) == projection({"spec": {"engine": 2}}, present)
    assert projection({"spec": {"engine": 1}}, present) != projection({"spec": {}}, present)
    assert projection({"spec": {}}, present) != projection({}, present)  # an error, not false
    assert projection({"spec": "x"}, present) != projection({"spec": {}}, present)


def test_specs_that_differ_in_what_a_rule_reads_get_their_own_verdicts() -> None:
    validation._REMEMBERED.clear()
    valid = copy.deepcopy(LLAVA)
    broken = copy.deepcopy(LLAVA)
    broken["engine"] = {**broken.get("engine", {}), "kvCacheDtype": "fp8", "weightOnlyPrecision": "int8"}
    other_batch = copy.deepcopy(LLAVA)
    other_batch["engine"] = {**other_batch.get("engine", {}), "maxBatchSize": 99}
    for _ in range(2):  # the second round from what the first remembered
        assert check_spec(valid)[1] == [] and check_spec(other_batch)[1] == []
        problems = [problem.path for problem in check_spec(broken)[1]]
        assert problems == ["spec.engine.weightOnlyPrecision"]
    remembered = len(validation._REMEMBERED)
    check_spec(other_batch)
    assert len(validation._REMEMBERED) == remembered  # nothing evaluated again


def test_remembered_verdicts_are_those_cel_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = [copy.deepcopy(LLAVA) for _ in range(3)]
    specs[1]["engine"] = {**specs[1].get("engine", {}), "maxSeqLen": 10, "maxInputLen": 20}
    specs[2]["serving"] = {**specs[2].get("serving", {}), "zeroPad": True}
    validation._REMEMBERED.clear()
    warm = [check_spec(spec)[1] for spec in specs + specs]
    monkeypatch.setattr(validation, "_REMEMBERED_HELD", 0)  # every rule evaluated afresh
    cold = []
    for spec in specs + specs:
        validation._REMEMBERED.clear()
        cold.append(check_spec(spec)[1])
    assert warm == cold and warm[1] and warm[2]
