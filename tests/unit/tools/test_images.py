"""The real images' tooling without building anything (`make images`): the registry images' names, the
commands that build them, and the chart values that point at them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from engine_builder import versions
from mmd_operator import __version__
from mmd_testbed.localcluster import image_build
from mmd_testbed.localcluster import images as local_images
from tools import images

ROOT = Path(__file__).resolve().parents[3]
CHART_VALUES = ROOT / "charts" / "mmd-operator" / "values.yaml"


def test_registry_images_are_tagged_as_the_pinned_defaults_name_them() -> None:
    references = images.registry_images("ghcr.io/mmd-operator/", "0.1.0")
    assert references == {
        "operator": "ghcr.io/mmd-operator/operator:0.1.0",
        "engine-builder": versions.BUILDER_IMAGE,
        "serving": versions.SERVING_IMAGE,
        "trtllm-serve": versions.TRTLLM_SERVE_IMAGE,
    }
    values = yaml.safe_load(CHART_VALUES.read_text())
    assert values["images"] == {
        "engineBuilder": versions.BUILDER_IMAGE,
        "serving": versions.SERVING_IMAGE,
        "trtllmServe": versions.TRTLLM_SERVE_IMAGE,
    }
    assert values["hfEndpoint"] == ""
    assert values["image"]["repository"] == "ghcr.io/mmd-operator/operator"


def test_the_chart_values_point_at_the_built_images_and_the_local_hub() -> None:
    local = {
        "operator": "localhost/mmd-operator/operator:local-1",
        "engine-builder-cpu": "localhost/mmd-operator/engine-builder:local-1",
        "serving-cpu": "localhost/mmd-operator/serving:local-1",
        "trtllm-serve-cpu": "localhost/mmd-operator/trtllm-serve:local-1",
    }
    assert list(local) == list(local_images.LOCAL_TARGETS)
    assert image_build.chart_values(local, "http://hub.mmd-hub.svc.cluster.local") == [
        "image.repository=localhost/mmd-operator/operator",
        "image.tag=local-1",
        "images.engineBuilder=localhost/mmd-operator/engine-builder:local-1",
        "images.serving=localhost/mmd-operator/serving:local-1",
        "images.trtllmServe=localhost/mmd-operator/trtllm-serve:local-1",
        "hfEndpoint=http://hub.mmd-hub.svc.cluster.local",
    ]
    document = image_build.chart_values_document(local, "http://hub.mmd-hub.svc.cluster.local")
    assert document == {
        "image": {"repository": "localhost/mmd-operator/operator", "tag": "local-1"},
        "images": {
            "engineBuilder": "localhost/mmd-operator/engine-builder:local-1",
            "serving": "localhost/mmd-operator/serving:local-1",
            "trtllmServe": "localhost/mmd-operator/trtllm-serve:local-1",
        },
        "hfEndpoint": "http://hub.mmd-hub.svc.cluster.local",
    }
    # Every key is one the chart has (its schema refuses others).
    values = yaml.safe_load(CHART_VALUES.read_text())
    assert set(document["images"]) <= set(values["images"]) and "hfEndpoint" in values
    assert "hfEndpoint" not in image_build.chart_values_document(local)


@pytest.mark.parametrize("tool", ["docker", "buildah"])
def test_the_registry_build_runs_one_build_per_target_and_pushes_when_asked(tool: str) -> None:
    references = images.registry_images("registry.example.com/ml", "1.2.3")
    releases = images.release_images("registry.example.com/ml", "1.2.3")
    commands = images.registry_commands(images.REPO_ROOT, references, tool=tool, push=True, releases=releases)
    built = [command for command in commands if "--target" in command]
    assert [command[command.index("--target") + 1] for command in built] == [
        "operator",
        "engine-builder",
        "serving",
        "trtllm-serve",
        "engine-builder",
        "serving",
    ]
    # The engine path's last release, from the same stages with its row's arguments.
    last = versions.ENGINE_RELEASES["1.2.1"]
    for command in built[4:]:
        arguments = [command[i + 1] for i, part in enumerate(command) if part == "--build-arg"]
        assert arguments == [
            "TRITON_TAG=26.07",
            "TRTLLM_VERSION=1.2.1",
            "TEMPLATE_TAG=v1.2.1",
            f"TEMPLATE_REPOSITORY={last.template_repository}",
            f"TEMPLATE_DIR={last.template_dir}",
        ]
        assert command[command.index("-t") + 1].endswith(":1.2.3-trtllm1.2.1")
    assert all(str(images.REPO_ROOT) == command[-1] for command in built)
    if tool == "docker":
        assert all("--push" in command for command in built)
    else:
        assert [command for command in commands if command[1] == "push"] == [
            ["buildah", "push", reference]
            for reference in [*references.values(), *(name for _, name, _ in releases)]
        ]


def test_make_images_dry_run_prints_the_commands_and_the_helm_install(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert images.main(["--registry", "registry.example.com/ml", "--push", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        "docker buildx build --target serving -t registry.example.com/ml/serving:0.1.0-trtllm0.19.0 --push"
        in out
    )
    assert "--set images.engineBuilder=registry.example.com/ml/engine-builder:0.1.0-trtllm0.19.0" in out
    # The trtllm-serve runtime's image, FROM TensorRT-LLM's release image, tagged with its version.
    serve = "registry.example.com/ml/trtllm-serve:0.1.0-trtllm1.2.1"
    assert f"docker buildx build --target trtllm-serve -t {serve} --push" in out
    assert "--set images.trtllmServe=registry.example.com/ml/trtllm-serve:0.1.0-trtllm1.2.1" in out
    assert "helm install mmd-operator charts/mmd-operator" in out


@pytest.mark.parametrize("page", ["README.md", "charts/mmd-operator/README.md"])
def test_the_install_command_a_page_shows_is_what_make_images_prints(page: str) -> None:
    printed: list[str] = []
    references = images.registry_images("registry.example.com/ml", __version__)
    image_build.print_values(references, None, printed.append)
    command = [line.strip() for line in printed if not line.startswith("==>")]
    text = (ROOT / page).read_text()
    start = text.index("helm install mmd-operator charts/mmd-operator")
    shown = [line.strip().lstrip("$ ") for line in text[start:].splitlines()[: len(command)]]
    assert shown == command
