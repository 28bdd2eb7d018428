"""`mmctl validate` never passes on nothing: empty files and directories, paths that match no file, a kind
that is a near miss of MultimodalDeployment and a key given twice are errors with the file and the line;
`--cluster` against a cluster it cannot ask says so in one line with an exit code of its own; the exit
codes are documented in `--help`; JSON problems carry their field's line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mmctl import validate
from mmctl.main import main
from mmd_testbed.ports import free_port
from tests.support.examples import EXAMPLES_DIR

LLAVA = (EXAMPLES_DIR / "llava.yaml").read_text()


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], list[str]]:
    code = main(["validate", *args])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def _line_of(text: str, needle: str, start: int = 1) -> int:
    """The line (from 1) of the first line from `start` on that holds `needle`."""
    lines = text.splitlines()
    return next(n for n in range(start, len(lines) + 1) if needle in lines[n - 1])


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("", "{path}:1: nothing to check: the file is empty"),
        ("\n\n   \n", "{path}:1: nothing to check: the file is empty"),
        (
            "# nothing yet\n---\n---\n",
            "{path}:1: nothing to check: the file holds no YAML document, only comments or empty ones",
        ),
    ],
    ids=["empty", "blank", "comments-only"],
)
def test_a_file_without_a_document_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, says: str
) -> None:
    path = tmp_path / "apps.yaml"
    path.write_text(content)
    code, out, err = _run(capsys, "-f", str(path))
    assert code == validate.EXIT_UNREADABLE == 2
    assert err == [says.format(path=path)]
    assert out == ["0 resources: 0 ok, 0 with warnings, 0 invalid; 0 other documents skipped; 1 input error"]


def test_a_directory_without_a_yaml_file_and_a_path_that_matches_none_are_input_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "apps"
    (empty / ".git").mkdir(parents=True)
    (empty / ".git" / "hidden.yaml").write_text(LLAVA)  # hidden: not read
    (empty / "README.md").write_text("# not YAML\n")
    missing = tmp_path / "deploy" / "*.yaml"  # a glob the shell did not expand
    good = tmp_path / "llava.yaml"
    good.write_text(LLAVA)
    code, out, err = _run(capsys, "-f", str(empty), "-f", str(missing), "-f", str(good))
    assert code == 2
    assert err == [
        f"{empty}: no *.yaml, *.yml, *.json file in the directory",
        f"{missing}: no such file or directory",
    ]
    # The inputs that can be read are still checked.
    assert (
        out[-1] == "1 resource: 0 ok, 1 with warnings, 0 invalid; 0 other documents skipped; 2 input errors"
    )


def test_inputs_without_a_single_multimodal_deployment_are_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "services.yaml"
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "front"}}
    path.write_text(yaml.safe_dump_all([service, service]))
    code, out, err = _run(capsys, "-f", str(path))
    assert code == 2
    assert err == ["nothing to check: no MultimodalDeployment among the 2 documents read"]
    assert (
        out[-1] == "0 resources: 0 ok, 0 with warnings, 0 invalid; 2 other documents skipped; 1 input error"
    )


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        (
            "MultiModalDeployment",
            'kind: is "MultiModalDeployment"; did you mean MultimodalDeployment? (kinds are case-sensitive',
        ),
        ("multimodaldeployment", 'kind: is "multimodaldeployment"; did you mean MultimodalDeployment?'),
        ("MultimodalDeployments", 'kind: is "MultimodalDeployments"; did you mean MultimodalDeployment?'),
        ("ModelDeployment", 'kind: is "ModelDeployment", but serving.multimodal.dev has only the kind'),
    ],
)
def test_a_near_miss_of_the_kind_is_an_error_naming_the_right_spelling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, says: str
) -> None:
    text = LLAVA.replace("kind: MultimodalDeployment", f"kind: {kind}")
    path = tmp_path / "typo.yaml"
    path.write_text(text)
    code, out, _ = _run(capsys, "-f", str(path))
    assert code == validate.EXIT_INVALID == 1
    start = _line_of(text, "apiVersion:")
    assert out[0] == f"{path}:{start} llava 1 error"
    assert out[1].startswith(f"  {says}"), out[1]
    assert out[-1] == "1 resource: 0 ok, 0 with warnings, 1 invalid; 0 other documents skipped"
    code, report = main(["validate", "-o", "json", "-f", str(path)]), json.loads(capsys.readouterr().out)
    (error,) = report["resources"][0]["errors"]
    assert error["path"] == "kind" and error["line"] == _line_of(text, f"kind: {kind}")


def test_another_kind_of_another_group_is_still_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "both.yaml"
    path.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n---\n" + LLAVA)
    code, out, _ = _run(capsys, "-f", str(path))
    assert code == 0 and out[-1].endswith("; 1 other document skipped")


@pytest.mark.parametrize("where", ["spec.engine", "metadata"])
def test_a_key_given_twice_is_an_error_with_both_lines_not_a_silent_last_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    if where == "spec.engine":
        text = LLAVA.replace("    maxBatchSize: 8\n", "    maxBatchSize: 8\n    maxBatchSize: 16\n")
        first, key = _line_of(LLAVA, "maxBatchSize: 8"), "maxBatchSize"
    else:
        text = LLAVA.replace("  name: llava\n", "  name: llava\n  name: llava-two\n")
        first, key = _line_of(LLAVA, "name: llava"), "name"
    assert text != LLAVA
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    code, out, err = _run(capsys, "-f", str(path))
    assert code == 2
    assert err == [
        f'{path}:{first + 1}:{5 if where == "spec.engine" else 3}: not valid YAML: found the key "{key}" '
        f"twice (first at line {first}): the first value would be silently dropped"
    ]
    assert out[-1].startswith("0 resources")


def test_a_merge_key_may_be_overridden_and_equal_keys_in_different_mappings_are_fine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `<<` is for overriding (a YAML merge); `tier` in labels and in annotations are different mappings.
    merged = "  labels: &labels {team: ml, tier: gold}\n  annotations:\n    <<: *labels\n    tier: silver\n"
    text = LLAVA.replace("  name: llava\n", "  name: llava\n" + merged)
    assert text != LLAVA
    path = tmp_path / "merged.yaml"
    path.write_text(text)
    code, out, _ = _run(capsys, "-f", str(path))
    assert code == 0, out
    assert out[-1] == "1 resource: 0 ok, 1 with warnings, 0 invalid; 0 other documents skipped"


def test_json_problems_carry_the_line_of_their_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = LLAVA.replace("    maxBatchSize: 8\n", "    maxBatchSize: 8\n    maxMultimodalLen: 4000\n")
    text = text.replace(
        "  engine:\n",
        "  serving:\n    replicas: 2\n  engineCache:\n    accessMode: ReadWriteOnce\n  engine:\n",
    )
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code = main(["validate", "-o", "json", "-f", str(path)])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    (resource,) = report["resources"]
    lines = {entry["path"]: entry["line"] for entry in resource["errors"] + resource["warnings"]}
    assert lines["spec.engine.maxMultimodalLen"] == _line_of(text, "maxMultimodalLen: 4000")
    assert lines["spec.engineCache.accessMode"] == _line_of(text, "accessMode: ReadWriteOnce")
    assert lines["spec.model.source.huggingface.revision"] == _line_of(text, "huggingface:")  # not written


def test_the_exit_codes_are_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["validate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit status:" in text
    for code, meaning in validate.EXIT_CODES.items():
        assert f"{code} {' '.join(meaning.split())}" in text
    assert sorted(validate.EXIT_CODES) == [0, 1, 2, 3, 4]


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "not-a-token"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ml"}}],
                "current-context": "c",
            }
        )
    )
    return path


def test_an_unreachable_api_server_is_one_line_and_exit_code_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = f"https://127.0.0.1:{free_port()}"
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", server)
    code, out, err = _run(
        capsys, "--cluster", "--kubeconfig", str(kubeconfig), "-f", str(EXAMPLES_DIR / "llava.yaml")
    )
    assert code == validate.EXIT_CLUSTER == 4
    assert out == []
    assert err == [
        f"mmctl validate --cluster: cannot reach the API server {server}: Failed to establish a new "
        "connection: [Errno 111] Connection refused"
    ]


def test_an_unreadable_kubeconfig_is_exit_code_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-kubeconfig"
    code, out, err = _run(
        capsys, "--cluster", "--kubeconfig", str(missing), "-f", str(EXAMPLES_DIR / "llava.yaml")
    )
    assert code == 4 and out == []
    (line,) = err
    assert line.startswith(f"mmctl validate --cluster: cannot read the kubeconfig ({missing}): ")
