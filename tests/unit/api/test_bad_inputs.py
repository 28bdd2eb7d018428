"""The bad-input catalogue offline: what `plan_resource` can refuse alone, it refuses with the field path,
the rule and the values it compares; every fix is valid; an update that changes the model type breaks the
transition rule."""

from __future__ import annotations

from collections import Counter

import pytest
import yaml

from mmd_operator.api.validation import check_spec, check_update
from mmd_operator.desired import serving, triton
from mmd_operator.plan.resource_plan import plan_resource
from tests.support.bad_inputs import (
    CASES,
    INVALID,
    OUTCOMES,
    REFUSED,
    SERVER_TYPE,
    UPDATE,
    BadInput,
    document,
)
from tests.support.invalid_specs import CASES as OFFLINE_CASES
from tests.support.invalid_specs import problems_of

OFFLINE = [case for case in CASES if case.offline]


def test_the_catalogue_has_at_least_fifty_new_cases_of_every_outcome() -> None:
    assert len(CASES) >= 50
    ids = [case.id for case in CASES]
    assert len(set(ids)) == len(ids)
    assert not set(ids) & {case[0] for case in OFFLINE_CASES}
    assert set(Counter(case.outcome for case in CASES)) == set(OUTCOMES)
    fixed_names = [case.fixed["metadata"]["name"] for case in CASES]
    assert len(set(fixed_names)) == len(fixed_names)


@pytest.mark.parametrize("case", OFFLINE, ids=[case.id for case in OFFLINE])
def test_offline_checks_refuse_with_the_path_rule_and_values(case: BadInput) -> None:
    problems = problems_of(case.document)
    assert any(
        p.startswith(f"{case.path}: ") and case.fragment in p and all(v in p for v in case.values)
        for p in problems
    ), problems


def test_every_refusal_that_compares_values_names_them() -> None:
    # Only a wrong type (the API server names the type, not the value) or a field that is missing or not
    # allowed at all has no value to show.
    without_values = {
        case.id
        for case in CASES
        if case.outcome in {REFUSED, INVALID, UPDATE} and not case.values and case.server != SERVER_TYPE
    }
    assert without_values == set(), without_values


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_fix_is_valid(case: BadInput) -> None:
    assert problems_of(case.fixed) == []


@pytest.mark.parametrize("case", [c for c in CASES if c.yaml_text], ids=lambda c: c.id)
def test_yaml_text_is_what_the_document_says(case: BadInput) -> None:
    assert case.yaml_text is not None
    assert yaml.safe_load(case.yaml_text) == case.document


@pytest.mark.parametrize("case", [c for c in CASES if c.outcome == UPDATE], ids=lambda c: c.id)
def test_changing_the_model_type_breaks_the_transition_rule(case: BadInput) -> None:
    # Each side alone is valid; only the change is refused.
    assert problems_of(case.document) == [] and problems_of(case.updated) == []
    problems = check_update(case.document["spec"], case.updated["spec"])
    old, new = case.values
    expected = {
        "spec.model.type": f"spec.model.type: model.type is immutable ({old}, now {new}): another model type "
        "is another deployment (engines, repository layout and serving pods all differ); create a new "
        "MultimodalDeployment instead",
        "spec.runtime": f"spec.runtime: runtime is immutable ({old}, now {new}): the other runtime serves "
        "from other files in the engine cache with other pods and another API; create a new "
        "MultimodalDeployment instead",
    }
    assert [str(p) for p in problems] == [expected[case.path]]
    # Changing anything else is allowed.
    changed = {**case.document["spec"], "serving": {"replicas": 3}}
    assert check_update(case.document["spec"], changed) == []


def test_strict_types_like_the_api_server() -> None:
    spec = CASES[0].fixed["spec"]
    for section, key, value in (
        ("serving", "streaming", "yes"),
        ("serving", "replicas", "2"),
        ("engine", "maxBatchSize", 8.0 + 0.5),
    ):
        _, problems = check_spec({**spec, section: {**spec.get(section, {}), key: value}})
        assert [p.path for p in problems] == [f"spec.{section}.{key}"], problems


def test_no_spec_can_render_a_repository_over_the_configmap_limit() -> None:
    # Nothing a user sets reaches the rendered configs as free text (paths derive from the cacheKey) and
    # every number is bounded, so the largest repository of every type stays far below the limit the
    # operator checks (RepositoryTooLarge); the pod metadata that can be large is checked instead.
    largest = 0
    for model, patch in (
        ("llava", {"serving": {"streaming": True, "instances": {"bls": 256}}}),
        (
            "vila",
            {
                # A checkpoint whose context the knowledge does not know: the longest lengths pass.
                "model": {"source": {"huggingface": {"repo": "example/vila-long-context"}}},
                "engine": {"maxImagesPerRequest": 64, "maxInputLen": 1_048_575, "maxSeqLen": 1_048_576},
            },
        ),
        ("internlm_xcomposer2", {}),
        ("whisper", {}),
        ("mllama", {}),
    ):
        _, plan = plan_resource(document("largest", model, {"spec": patch}))
        largest = max(largest, serving.configmap_size(triton.repository_data(plan)))
    assert 0 < largest < serving.CONFIGMAP_DATA_LIMIT // 20
