"""The operator's settings: read from `MMD_*` variables, checked, and the default images they give specs."""

from __future__ import annotations

import pytest
import yaml

from engine_builder import versions
from mmd_operator.config import ConfigError, OperatorConfig
from mmd_operator.plan.resource_plan import plan_resource
from tests.support.examples import EXAMPLE_PATHS


def _llava() -> dict[str, object]:
    path = next(p for p in EXAMPLE_PATHS if p.stem == "llava")
    document: dict[str, object] = yaml.safe_load(path.read_text())
    return document


def test_every_setting_reads_from_its_variable_with_its_type() -> None:
    config = OperatorConfig.from_env(
        {
            "MMD_WORKERS": "16",
            "MMD_RESYNC_SECONDS": "120",
            "MMD_NAMESPACES": "team-a, team-b,",
            "MMD_LOG_FORMAT": "json",
            "MMD_SERVING_IMAGE": "mirror.example/serving:1",
        }
    )
    assert (config.workers, config.resync_seconds, config.namespaces, config.log_format) == (
        16,
        120.0,
        ("team-a", "team-b"),
        "json",
    )
    assert config.serving_image == "mirror.example/serving:1"
    assert config.builder_image == versions.BUILDER_IMAGE
    assert OperatorConfig.from_env({"MMD_LOST_NODE_SECONDS": "0"}).lost_node_seconds == 0
    endpoints = {"MMD_HF_ENDPOINT": "https://hf-mirror.example", "MMD_PROMETHEUS_URL": "http://prom:9090/x"}
    assert (
        OperatorConfig.from_env({**endpoints, "MMD_ENGINE_CACHE_SIZE": "1.5Ti"}).engine_cache_size == "1.5Ti"
    )


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("MMD_WORKERS", "many", "MMD_WORKERS='many' is not a valid int"),
        ("MMD_WORKERS", "0", "workers must be at least 1"),
        ("MMD_LOG_FORMAT", "xml", "log_format must be text or json"),
        ("MMD_ENGINE_CACHE_ACCESS_MODE", "ReadMany", "is not an access mode"),
        ("MMD_LOST_NODE_SECONDS", "10", "lost_node_seconds must be 0 \\(off\\) or at least 15.*got 10"),
        ("MMD_ENGINE_CACHE_SIZE", "500GB", "engine_cache_size '500GB' is not a Kubernetes quantity of bytes"),
        ("MMD_HF_ENDPOINT", "hf-mirror.internal", "hf_endpoint 'hf-mirror.internal' is not an http"),
        ("MMD_PROMETHEUS_URL", "http://", "prometheus_url 'http://' is not an http:// or https:// URL"),
    ],
)
def test_a_setting_that_cannot_be_used_is_refused_by_name(variable: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        OperatorConfig.from_env({variable: value})


def test_default_images_leave_the_spec_as_written_and_a_mirror_fills_only_what_the_spec_leaves_out() -> None:
    document = _llava()
    assert OperatorConfig().with_spec_defaults(document["spec"]) == document["spec"]
    mirror = OperatorConfig(
        builder_image="mirror.example/builder:1", serving_image="mirror.example/serving:1"
    )
    filled = mirror.with_spec_defaults(document["spec"])
    assert isinstance(filled, dict)
    _, pinned_plan = plan_resource(document)
    _, mirrored_plan = plan_resource({**document, "spec": filled})
    assert mirrored_plan.settings.builder_image == "mirror.example/builder:1"
    assert mirrored_plan.settings.serving_image == "mirror.example/serving:1"
    # The builder image is a build input: another image is another engine.
    assert mirrored_plan.cache_key != pinned_plan.cache_key
    named = {**filled, "serving": {**filled["serving"], "image": "own.example/serving:2"}}
    assert mirror.with_spec_defaults(named)["serving"]["image"] == "own.example/serving:2"  # type: ignore[index]


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"lease_retry_seconds": 10.0}, "lease_retry_seconds < lease_renew_deadline_seconds"),
        ({"lease_renew_deadline_seconds": 15.0}, "got 2 < 15 < 15"),
        ({"lease_retry_seconds": 0.0}, "got 0 < 10 < 15"),
    ],
)
def test_timings_that_would_let_two_lead_are_refused(changes: dict[str, float], says: str) -> None:
    with pytest.raises(ConfigError, match="a leader stops before anyone may take over") as refused:
        OperatorConfig().with_changes(**changes)
    assert says in str(refused.value)


def test_the_leader_election_settings_come_from_the_environment() -> None:
    config = OperatorConfig.from_env(
        {
            "MMD_LEADER_ELECTION": "true",
            "MMD_LEASE_NAME": "mmd",
            "MMD_LEASE_NAMESPACE": "ops",
            "MMD_LEASE_DURATION_SECONDS": "20",
            "MMD_POD_NAME": "mmd-operator-5d9c-x2",
        }
    )
    assert config.leader_election and (config.lease_namespace, config.lease_name) == ("ops", "mmd")
    assert config.lease_duration_seconds == 20 and config.pod_name == "mmd-operator-5d9c-x2"
    assert not OperatorConfig().leader_election  # run from a checkout, it runs alone unless told


def test_images_of_a_registry_name_the_other_release_by_its_tag_and_any_other_image_leaves_it_alone() -> None:
    document = _llava()
    last = {
        **document["spec"],
        "engine": {**document["spec"].get("engine", {}), "tensorrtLlmVersion": "1.2.1"},
    }
    registry = OperatorConfig(
        builder_image="registry.example/ml/engine-builder:0.1.0-trtllm0.19.0",
        serving_image="registry.example/ml/serving:0.1.0-trtllm0.19.0",
    )
    filled = registry.with_spec_defaults(last)
    assert isinstance(filled, dict)
    assert filled["engine"]["builderImage"] == "registry.example/ml/engine-builder:0.1.0-trtllm1.2.1"
    assert filled["serving"]["image"] == "registry.example/ml/serving:0.1.0-trtllm1.2.1"
    # The default release keeps the images as set.
    kept = registry.with_spec_defaults(document["spec"])
    assert (
        isinstance(kept, dict)
        and kept["serving"]["image"] == "registry.example/ml/serving:0.1.0-trtllm0.19.0"
    )
    # An image tagged otherwise says nothing of 1.2.1: the release's own default applies.
    mirror = OperatorConfig(
        builder_image="mirror.example/builder:1", serving_image="mirror.example/serving:1"
    )
    _, plan = plan_resource({**document, "spec": mirror.with_spec_defaults(last)})
    assert plan.settings.serving_image == versions.ENGINE_RELEASES["1.2.1"].serving_image
    assert plan.settings.builder_image == versions.ENGINE_RELEASES["1.2.1"].builder_image
