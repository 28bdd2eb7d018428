"""The warning rules offline: each trap warns with the field, the values and the fix; a clean resource and
every pinned example warn of nothing, with or without the API server's defaults; the chart's admission
policy is the table's. (The operator's status note: test_desired.py.)"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmd_operator.api import warning_rules
from mmd_operator.api.validation import check_spec
from mmd_operator.api.warning_rules import RULES, admission_policy_spec, spec_warnings
from tests.support.examples import EXAMPLES_DIR
from tools import chart

ROOT = Path(__file__).resolve().parents[3]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
CLEAN: dict[str, Any] = {
    "model": {
        "type": "qwen2_vl",
        "source": {"huggingface": {"repo": "Qwen/Qwen2-VL-7B-Instruct", "revision": COMMIT}},
    },
    "engine": {"builderImage": "registry.example/builder:0.19.0"},
    "serving": {
        "replicas": 3,
        "image": "registry.example/serving@sha256:" + "ab" * 32,
        "imageUrlInput": True,
        "networkPolicy": {
            "clients": [{"podSelector": {"matchLabels": {"app": "chat"}}}],
            "egress": [{"cidr": "0.0.0.0/0", "exceptCidrs": ["10.0.0.0/8", "169.254.169.254/32"]}],
        },
    },
    "engineCache": {"accessMode": "ReadWriteMany"},
}


def _defaulted(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` as the API server stores it: every schema default filled in."""
    model, problems = check_spec(spec)
    assert model is not None and problems == [], problems
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def _warned(spec: dict[str, Any], **options: Any) -> list[str]:
    """The warnings of `spec`, which must be the same with and without the schema's defaults."""
    written = [str(w) for w in spec_warnings(spec, **options)]
    assert [str(w) for w in spec_warnings(_defaulted(spec), **options)] == written
    return written


def _with(patch: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(CLEAN)
    for section, values in patch.items():
        spec[section] = {**spec.get(section, {}), **values}
    return spec


def test_a_clean_resource_warns_of_nothing() -> None:
    assert _warned(CLEAN) == []
    assert _warned({"model": CLEAN["model"]}) == []


@pytest.mark.parametrize("path", sorted(EXAMPLES_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_the_examples_warn_only_that_their_revision_is_not_pinned(path: Path) -> None:
    # The examples name no revision (Hub commits cannot be checked from here); pinning one clears them.
    spec = yaml.safe_load(path.read_text())["spec"]
    hub = spec["model"]["source"].get("huggingface")
    expected = ["spec.model.source.huggingface.revision"] if hub is not None else []
    assert [w.split(":")[0] for w in _warned(spec)] == expected
    if hub is not None:
        hub["revision"] = COMMIT
        assert _warned(spec) == []


def test_a_read_write_once_cache_with_several_replicas_names_both_fields_and_the_fix() -> None:
    assert _warned(_with({"engineCache": {"accessMode": "ReadWriteOnce"}})) == [
        "spec.engineCache.accessMode: is ReadWriteOnce, which attaches the claim to one node at a time, and "
        "spec.serving.replicas is 3: serving pods scheduled onto a second node never start (Multi-Attach "
        "error, stuck in ContainerCreating); use ReadWriteMany where the storage can share, or keep "
        "spec.serving.replicas at 1"
    ]
    one_replica = _with({"engineCache": {"accessMode": "ReadWriteOnce"}, "serving": {"replicas": 1}})
    assert _warned(one_replica) == []


def test_the_operators_own_default_access_mode_is_named_as_such() -> None:
    spec = _with({})
    del spec["engineCache"]
    warned = _warned(spec, default_access_mode="ReadWriteOnce")
    assert len(warned) == 1 and warned[0].startswith("spec.engineCache.accessMode: is ReadWriteOnce, ")
    assert warned[0].endswith(
        "(spec.engineCache.accessMode is not set: ReadWriteOnce is the operator's default, the chart value "
        "engineCache.accessMode)"
    )
    assert _warned(spec, default_access_mode="ReadWriteMany") == []
    # What the spec says wins over the operator's default.
    assert _warned(_with({}), default_access_mode="ReadWriteOnce") == []


def test_a_revision_that_is_not_a_commit_says_how_to_find_the_commit() -> None:
    spec = _with({})
    spec["model"]["source"]["huggingface"]["revision"] = "v1.0"
    assert _warned(spec) == [
        'spec.model.source.huggingface.revision: is "v1.0", not a 40-character commit hash: the cacheKey '
        "holds this name, not the commit, so when the repository moves upstream the engine is never "
        "rebuilt, and a build elsewhere (another namespace or engine cache) fetches other weights under "
        "the same key; pin the commit that git ls-remote https://huggingface.co/Qwen/Qwen2-VL-7B-Instruct "
        "v1.0 prints"
    ]
    spec["model"]["source"]["huggingface"]["revision"] = COMMIT.upper()  # the Hub's hashes are lower case
    assert len(_warned(spec)) == 1
    del spec["model"]["source"]["huggingface"]["revision"]  # the default: main
    assert '"main"' in _warned(spec)[0]


def test_a_lora_adapter_revision_is_checked_like_the_models() -> None:
    spec = {
        "model": {
            "type": "internlm_xcomposer2",
            "source": {"pvc": {"claimName": "models"}},
            "lora": {"source": {"huggingface": {"repo": "org/adapter", "revision": "main"}}},
        }
    }
    assert [w.split(": is ")[0] for w in _warned(spec)] == ["spec.model.lora.source.huggingface.revision"]


@pytest.mark.parametrize(
    ("patch", "path", "says"),
    [
        (
            {"engineCache": {"accessMode": "ReadWriteOncePod"}},
            "spec.engineCache.accessMode",
            "all stay Pending",
        ),
        (
            {"serving": {"networkPolicy": None}},
            "spec.serving.imageUrlInput",
            "server-side request forgery); add spec.serving.networkPolicy",
        ),
        (
            {
                "serving": {
                    "networkPolicy": {
                        "clients": CLEAN["serving"]["networkPolicy"]["clients"],
                        "egress": [{"cidr": "::/0"}],
                    }
                }
            },
            "spec.serving.networkPolicy.egress",
            "allows cidr ::/0 without exceptCidrs while spec.serving.imageUrlInput is true",
        ),
        (
            {"engine": {"builderImage": "registry:5000/builder"}},
            "spec.engine.builderImage",
            '"registry:5000/builder", a moving tag',
        ),
        (
            {"serving": {"image": "nvcr.io/nvidia/tritonserver:latest"}},
            "spec.serving.image",
            "the engine then fails to load",
        ),
        (
            {"serving": {"networkPolicy": {"egress": []}}},
            "spec.serving.networkPolicy.clients",
            "every request times out",
        ),
    ],
    ids=[
        "read-write-once-pod",
        "image-urls-unrestricted",
        "image-urls-open-egress",
        "builder-latest",
        "serving-latest",
        "no-clients",
    ],
)
def test_each_trap_names_its_field_and_the_fix(patch: dict[str, Any], path: str, says: str) -> None:
    spec = _with(patch)
    spec["serving"] = {key: value for key, value in spec["serving"].items() if value is not None}
    warned = _warned(spec)
    assert len(warned) == 1 and warned[0].startswith(f"{path}: ") and says in warned[0], warned


def test_every_rule_has_a_unique_id_and_a_field_path() -> None:
    ids = [rule.id for rule in RULES]
    assert len(set(ids)) == len(ids) >= 9
    assert all(rule.path.startswith("spec.") for rule in RULES)


def test_every_rule_is_documented() -> None:
    documented = (ROOT / "docs" / "resource.md").read_text()
    assert [rule.id for rule in RULES if f"`{rule.id}`" not in documented] == []


def test_message_text_cannot_break_out_of_its_cel_string() -> None:
    with pytest.raises(ValueError, match="single quotes"):
        warning_rules._text("it's")


def test_the_charts_policy_is_the_table() -> None:
    template = (ROOT / chart.ADMISSION_WARNINGS_TEMPLATE).read_text()
    assert template == chart.admission_warnings_template()  # also the drift test's
    plain = "\n".join(line for line in template.splitlines() if "{{" not in line)
    policy, binding = yaml.safe_load_all(plain)
    assert policy["kind"] == "ValidatingAdmissionPolicy" and policy["spec"] == admission_policy_spec()
    assert [v["expression"] for v in policy["spec"]["validations"]] == [f"!({r.trap})" for r in RULES]
    assert binding["spec"]["validationActions"] == ["Warn", "Audit"]
    match = policy["spec"]["matchConstraints"]["resourceRules"]
    assert match == [
        {
            "apiGroups": ["serving.multimodal.dev"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["multimodaldeployments"],
        }
    ]


def test_kv_cache_reuse_on_the_engine_runtime_says_every_client_must_send_an_extra_id() -> None:
    spec = {
        "model": {"type": "llava", "source": {"pvc": {"claimName": "models"}}},
        "serving": {"kvCacheReuse": True},
    }
    warned = _warned(spec)
    assert len(warned) == 1
    assert warned[0].startswith("spec.serving.kvCacheReuse: is true, so TensorRT-LLM refuses every request")
    assert "prompt_table_extra_id" in warned[0] and "mmctl infer sends one" in warned[0]
    spec["serving"]["kvCacheReuse"] = False
    assert _warned(spec) == []
    # trtllm-serve hashes the images itself: no id for a client to send, nothing to warn of.
    served = {
        "runtime": "trtllm-serve",
        "model": {"type": "qwen2_5_vl", "source": {"pvc": {"claimName": "models"}}},
        "serving": {"kvCacheReuse": True},
    }
    assert _warned(served) == []
