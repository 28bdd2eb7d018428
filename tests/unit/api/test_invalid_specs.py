"""Bad input is refused with one precise message per problem: the field path, the rule and the values."""

from __future__ import annotations

import pytest

from tests.support.invalid_specs import BASE_MODELS, CASES, InvalidSpec, problems_of, resource


def test_there_are_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_invalid_spec_is_refused_with_its_path_rule_and_values(case: InvalidSpec) -> None:
    problems = problems_of(resource(case.base, case.patch))
    matching = [p for p in problems if p.startswith(f"{case.path}: ")]
    assert matching, f"no problem reported at {case.path}; got {problems}"
    assert any(case.fragment in p and all(v in p for v in case.values) for p in matching), (
        f"{case.fragment!r} with {case.values} not in {matching}"
    )


@pytest.mark.parametrize("base", sorted(BASE_MODELS))
def test_the_bases_themselves_are_valid(base: str) -> None:
    assert problems_of(resource(base)) == []


def test_every_problem_is_reported_at_once() -> None:
    patch = {
        "spec": {
            "engine": {"maxImagesPerRequest": 2, "tensorParallelSize": 3},
            "serving": {"accumulateTokens": True, "replicas": -1},
        }
    }
    problems = problems_of(resource("llava", patch))
    # Schema errors come first, as at the API server; both are reported together.
    assert [p.split(":")[0] for p in problems] == ["spec.engine.tensorParallelSize", "spec.serving.replicas"]
    patch = {
        "spec": {"engine": {"maxImagesPerRequest": 2}, "serving": {"accumulateTokens": True, "zeroPad": True}}
    }
    paths = sorted(p.split(":")[0] for p in problems_of(resource("llava", patch)))
    assert paths == [
        "spec.engine.maxImagesPerRequest",
        "spec.serving.accumulateTokens",
        "spec.serving.zeroPad",
    ]


def test_schema_rule_and_derivation_problems_are_reported_together() -> None:
    patch = {"spec": {"engine": {"maxMultimodalLen": 1}, "serving": {"accumulateTokens": True}}}
    paths = sorted(p.split(":")[0] for p in problems_of(resource("llava", patch)))
    assert paths == ["spec.engine.maxMultimodalLen", "spec.serving.accumulateTokens"]


def test_derivation_problems_are_reported_together() -> None:
    patch = {"spec": {"engine": {"maxMultimodalLen": 1}, "serving": {"cudaMemoryPoolBytes": 1}}}
    paths = sorted(p.split(":")[0] for p in problems_of(resource("llava", patch)))
    assert paths == ["spec.engine.maxMultimodalLen", "spec.serving.cudaMemoryPoolBytes"]
