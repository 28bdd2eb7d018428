"""The chart at `helm install` with the real helm on the real API server: its values schema refuses the
values that would pass and then stop the operator or fail later, before anything is created; it lets
`global` pass (the chart as a subchart of an umbrella chart); and the NOTES helm prints after an install
speak to that install and name only commands that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from mmctl.main import COMMANDS
from mmd_operator.config import MIN_LOST_NODE_SECONDS, ConfigError, OperatorConfig
from tests.support.kube import Tools
from tools import chart

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / chart.CHART_DIR
REFUSED = "values don't meet the specifications of the schema(s)"
SIZE = r"'500GB' does not match pattern '^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$'"
URL = r"does not match pattern '^(https?://[^\\s/?#]+([/?#]\\S*)?)?$'"

# Each value helm accepted before the schema said otherwise, and what helm now says of it.
BAD_VALUES = [
    (
        "lostNodeSeconds=5",
        [
            "at '/lostNodeSeconds': 'anyOf' failed",
            "at '/lostNodeSeconds': value must be 0",
            f"at '/lostNodeSeconds': minimum: got 5, want {MIN_LOST_NODE_SECONDS}",
        ],
    ),
    ("lostNodeSeconds=14", [f"at '/lostNodeSeconds': minimum: got 14, want {MIN_LOST_NODE_SECONDS}"]),
    ("engineCache.size=500GB", [f"at '/engineCache/size': {SIZE}"]),
    ("image.repository=", ["at '/image/repository': minLength: got 0, want 1"]),
    ("images.engineBuilder=", ["at '/images/engineBuilder': minLength: got 0, want 1"]),
    ("images.serving=", ["at '/images/serving': minLength: got 0, want 1"]),
    ("images.trtllmServe=", ["at '/images/trtllmServe': minLength: got 0, want 1"]),
    ("hfEndpoint=hf-mirror.internal", [f"at '/hfEndpoint': 'hf-mirror.internal' {URL}"]),
    ("prometheusUrl=prometheus-operated:9090", [f"at '/prometheusUrl': 'prometheus-operated:9090' {URL}"]),
    ("prometheusUrl=http://", [f"at '/prometheusUrl': 'http://' {URL}"]),
]
GOOD_VALUES = [
    "global.imageRegistry=registry.example.com",  # what an umbrella chart gives its subcharts
    "engineCache.size=1.5Ti",
    "images.serving=registry.example.com/ml/serving:1",
    "hfEndpoint=https://hf-mirror.example.com",
    "prometheusUrl=http://prometheus-operated.monitoring:9090",
]


def _released(tools: Tools, namespace: str) -> list[str]:
    listed = tools.run("helm", "list", "--all", "-n", namespace, "-o", "json").stdout
    return [release["name"] for release in json.loads(listed)]


@pytest.mark.parametrize(("value", "says"), BAD_VALUES, ids=[value for value, _ in BAD_VALUES])
def test_helm_install_refuses_a_value_the_operator_cannot_use_before_creating_anything(
    tools: Tools, namespace: str, value: str, says: list[str]
) -> None:
    result = tools.run("helm", "install", "refused", str(CHART), "-n", namespace, "--set", value, check=False)
    assert result.returncode != 0, result.stdout
    assert REFUSED in result.stderr, result.stderr
    for line in says:
        assert line in result.stderr, result.stderr
    # Refused before anything was sent: no release, no object of the chart.
    assert _released(tools, namespace) == []
    made = tools.run(
        "kubectl", "get", "all,serviceaccounts,roles,rolebindings", "-n", namespace, "-l",
        "app.kubernetes.io/instance=refused", "-o", "name",
    ).stdout  # fmt: skip
    assert made.strip() == ""


@pytest.mark.parametrize("lost_node_seconds", [0, MIN_LOST_NODE_SECONDS])
def test_helm_install_accepts_global_and_the_edges_of_each_rule_and_the_operator_takes_them(
    tools: Tools, namespace: str, lost_node_seconds: int
) -> None:
    values = [argument for value in GOOD_VALUES for argument in ("--set", value)]
    values += ["--set", f"lostNodeSeconds={lost_node_seconds}", "--set", "crds.enabled=false"]
    installed = tools.run(
        "helm", "install", "accepted", str(CHART), "-n", namespace, "--dry-run=server", *values
    )  # fmt: skip
    manifest = installed.stdout.split("\nMANIFEST:\n", 1)[1].split("\nNOTES:\n", 1)[0]
    deployment = next(d for d in yaml.safe_load_all(manifest) if d and d["kind"] == "Deployment")
    env = {
        e["name"]: e["value"]
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        if "value" in e
    }
    config = OperatorConfig.from_env(env)  # what the operator reads at start-up: no ConfigError
    assert config.lost_node_seconds == lost_node_seconds and config.engine_cache_size == "1.5Ti"
    assert config.prometheus_url == "http://prometheus-operated.monitoring:9090"
    # The operator refuses the same values the schema refuses (one rule, in mmd_operator.config).
    for variable, bad in (
        ("MMD_LOST_NODE_SECONDS", "5"),
        ("MMD_ENGINE_CACHE_SIZE", "500GB"),
        ("MMD_HF_ENDPOINT", "hf-mirror.internal"),
        ("MMD_PROMETHEUS_URL", "http://"),
    ):
        with pytest.raises(ConfigError):
            OperatorConfig.from_env({**env, variable: bad})


def _notes(tools: Tools, namespace: str, *values: str) -> str:
    installed = tools.run(
        "helm", "install", "noted", str(CHART), "-n", namespace, "--dry-run=server",
        "--set", "crds.enabled=false", *values,
    )  # fmt: skip
    notes = installed.stdout.split("\nNOTES:\n", 1)[1]
    assert notes.strip()
    return notes


def test_the_notes_speak_to_this_install_and_name_only_commands_that_exist(
    tools: Tools, namespace: str
) -> None:
    notes = _notes(tools, namespace)
    # Only the users' mmctl commands, only make targets of the Makefile (as command lines or quoted).
    commands = re.findall(r"^\s+mmctl ([a-z-]+)", notes, re.MULTILINE)
    assert commands == ["validate"], notes
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    made = re.findall(r"`make ([a-z-]+)", notes)
    assert made == ["images"] and set(made) <= targets, notes
    assert set(commands) <= set(COMMANDS) and "mmctl validate --cluster" in notes
    # Nothing of the repository's local test bed.
    for word in ("kwok", "local cluster", "test bed", "--real-nodes", "cluster up", "--load"):
        assert word not in notes, word
    # The chart's default images are not published: the notes say so, and name them.
    assert "The chart's default images are not published" in notes
    assert "ghcr.io/mmd-operator/operator:0.1.0" in notes
    own = _notes(
        tools,
        namespace,
        "--set", "image.repository=registry.example.com/ml/operator",
        "--set", "images.engineBuilder=registry.example.com/ml/engine-builder:1",
        "--set", "images.serving=registry.example.com/ml/serving:1",
        "--set", "images.trtllmServe=registry.example.com/ml/trtllm-serve:1",
        "--set", "watchNamespaces={ml,vision}",
    )  # fmt: skip
    assert "not published" not in own and "ghcr.io" not in own
    assert "managing MultimodalDeployments in: ml, vision." in own
