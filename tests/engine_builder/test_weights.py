"""The trtllm-serve runtime's weights download, run as its Job runs it, against a double of the Hub's API.

The real huggingface_hub client (the builder's pin) talks to `doubles/hub.py` on 127.0.0.1 through
HF_ENDPOINT; never to the real Hub. Covered: a branch resolved and the snapshot stored under its commit's
key, once (a second run and a plan naming the commit fetch nothing), a revision that does not exist, a
SIGKILL in the middle of a file (nothing looks complete; the next run removes the leftover and finishes),
a gated repository with and without the token (which appears in no output), and an unreachable Hub.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine_builder.weights import inspect_snapshot
from engine_builder.weights_format import (
    DownloadFailed,
    DownloadPlan,
    DownloadSucceeded,
    parse_termination_message,
    snapshot_directory,
    weights_key,
)
from mmd_testbed import build_tools
from mmd_testbed.build_tools.hub import Hub, HubServer, Repository, commit_of

REPO = "Qwen/Qwen2.5-VL-3B-Instruct"
GATED = "google/gemma-3-4b-it"
TOKEN = "hf_double_token_3f9a7c"
MAIN = commit_of("qwen main")
OLD = commit_of("qwen old")


def files(seed: str, weights_size: int = 300_000) -> dict[str, bytes]:
    weights = (seed.encode() * (weights_size // len(seed) + 1))[:weights_size]
    return {
        "config.json": json.dumps(
            {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "seed": seed}
        ).encode(),
        "tokenizer.json": b'{"model": {"type": "BPE"}}',
        "model.safetensors": weights,
        "processor/preprocessor_config.json": b'{"image_processor_type": "Qwen2VLImageProcessor"}',
    }


@pytest.fixture
def hub() -> Iterator[HubServer]:
    state = Hub()
    state.repositories[REPO] = Repository(
        commits={MAIN: files("main"), OLD: files("old")}, refs={"main": MAIN, "v1.0": OLD}
    )
    state.repositories[GATED] = Repository(
        commits={commit_of("gemma"): files("gemma")}, refs={"main": commit_of("gemma")}, token=TOKEN
    )
    with HubServer(state) as server:
        yield server


def plan(repo: str, revision: str) -> str:
    return DownloadPlan(key=weights_key(repo, revision), repo=repo, revision=revision).model_dump_json()


def start(
    hub: HubServer | str, tmp_path: Path, repo: str, revision: str, *extra: str
) -> subprocess.Popen[str]:
    """The download as its Job runs it, against `hub` (a double here, or the endpoint of one elsewhere)."""
    endpoint = hub if isinstance(hub, str) else hub.endpoint
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf-home")}
    env.pop("HF_TOKEN", None)
    return subprocess.Popen(
        [
            sys.executable, "-m", "engine_builder", "download",
            "--plan-json", plan(repo, revision),
            "--cache-dir", str(tmp_path / "cache"),
            "--termination-log", str(tmp_path / "termination-log"),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )  # fmt: skip


def run(
    hub: HubServer | str, tmp_path: Path, repo: str, revision: str, *extra: str
) -> tuple[int, str, object]:
    process = start(hub, tmp_path, repo, revision, *extra)
    output, _ = process.communicate(timeout=120)
    result = parse_termination_message((tmp_path / "termination-log").read_text())
    return process.returncode, output, result


def cache_names(tmp_path: Path) -> list[str]:
    return sorted(path.name for path in (tmp_path / "cache").iterdir())


def test_a_branch_is_resolved_and_its_snapshot_stored_under_the_commit(
    hub: HubServer, tmp_path: Path
) -> None:
    code, output, result = run(hub, tmp_path, REPO, "main")
    assert code == 0, output
    assert isinstance(result, DownloadSucceeded)
    snapshot = weights_key(REPO, MAIN)
    assert (result.key, result.commit, result.snapshot_key) == (weights_key(REPO, "main"), MAIN, snapshot)
    assert result.snapshot_key != result.key and not result.cache_hit
    assert (result.files, result.total_bytes) == (4, sum(map(len, files("main").values())))
    assert f"{REPO}@main is commit {MAIN}" in output
    # Only the entry and its lock: no work directory, no huggingface_hub metadata.
    assert cache_names(tmp_path) == sorted([snapshot, f".lock-{snapshot}"])
    entry = tmp_path / "cache" / snapshot
    manifest, problems = inspect_snapshot(entry, snapshot)
    assert manifest is not None and problems == [] and manifest.commit == MAIN
    directory = entry / snapshot_directory(REPO)
    stored = {
        p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }
    assert stored == files("main")


def test_the_same_snapshot_is_never_downloaded_twice(hub: HubServer, tmp_path: Path) -> None:
    assert run(hub, tmp_path, REPO, "main")[0] == 0
    fetched = len(hub.hub.downloads(REPO))
    assert fetched == 4
    # Again by branch, and by the commit it resolved to: complete, so nothing is fetched.
    for revision in ("main", MAIN):
        code, output, result = run(hub, tmp_path, REPO, revision)
        assert code == 0, output
        assert isinstance(result, DownloadSucceeded) and result.cache_hit
        assert result.snapshot_key == weights_key(REPO, MAIN)
        assert "is complete: nothing to download" in output
    assert len(hub.hub.downloads(REPO)) == fetched
    # A commit needs no resolving: its key is the snapshot's.
    assert weights_key(REPO, MAIN) == run(hub, tmp_path, REPO, MAIN)[2].key  # type: ignore[attr-defined]


def test_another_revision_is_another_snapshot(hub: HubServer, tmp_path: Path) -> None:
    assert run(hub, tmp_path, REPO, "main")[0] == 0
    code, _, result = run(hub, tmp_path, REPO, "v1.0")
    assert code == 0 and isinstance(result, DownloadSucceeded) and result.commit == OLD
    assert weights_key(REPO, OLD) in cache_names(tmp_path)


def test_a_revision_that_does_not_exist_fails_naming_the_field(hub: HubServer, tmp_path: Path) -> None:
    code, output, result = run(hub, tmp_path, REPO, "no-such-branch")
    assert code == 1
    assert isinstance(result, DownloadFailed)
    assert result.step == "resolve" and result.key == weights_key(REPO, "no-such-branch")
    assert result.reason == (
        f"revision no-such-branch does not exist in {REPO} on {hub.endpoint}: name a branch, tag or commit "
        "of the repository in spec.model.source.huggingface.revision"
    )
    assert "download failed: revision no-such-branch does not exist" in output
    assert not (tmp_path / "cache").exists() or cache_names(tmp_path) == []
    assert hub.hub.downloads(REPO) == []


def test_a_commit_that_does_not_exist_fails_at_download(hub: HubServer, tmp_path: Path) -> None:
    missing = commit_of("never pushed")
    code, _, result = run(hub, tmp_path, REPO, missing)
    assert code == 1 and isinstance(result, DownloadFailed) and result.step == "download"
    assert f"revision {missing} does not exist" in result.reason
    # The failed work directory is removed; only the lock of the key stays.
    assert cache_names(tmp_path) == [f".lock-{weights_key(REPO, missing)}"]


def test_a_download_killed_midway_never_looks_complete_and_the_next_one_finishes(
    hub: HubServer, tmp_path: Path
) -> None:
    hub.hub.chunk_delay = 0.05  # 300 kB in 4 kB chunks: about 4 s for the weights
    process = start(hub, tmp_path, REPO, "main")
    snapshot = weights_key(REPO, MAIN)
    deadline = time.monotonic() + 60
    # A third of the weights sent (huggingface_hub holds them in memory until 10 MiB or the end).
    while (
        max((n for path, n in hub.hub.sent.items() if path.endswith("model.safetensors")), default=0)
        < 100_000
    ):
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "the download never started writing"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    # What a reader of the cache sees: no entry, only the dead download's work directory.
    assert not (tmp_path / "cache" / snapshot).exists()
    assert cache_names(tmp_path) == sorted([f".lock-{snapshot}", f".work-{snapshot}"])
    assert not (tmp_path / "termination-log").exists()

    hub.hub.chunk_delay = 0.0
    code, output, result = run(hub, tmp_path, REPO, "main")
    assert code == 0, output
    assert f"removing .work-{snapshot}, left by a download of this snapshot that did not finish" in output
    assert isinstance(result, DownloadSucceeded) and not result.cache_hit
    assert cache_names(tmp_path) == sorted([snapshot, f".lock-{snapshot}"])
    manifest, problems = inspect_snapshot(tmp_path / "cache" / snapshot, snapshot)
    assert manifest is not None and problems == []


def test_a_gated_repository_needs_the_token_which_is_never_shown(hub: HubServer, tmp_path: Path) -> None:
    code, output, result = run(hub, tmp_path, GATED, "main")
    assert code == 1 and isinstance(result, DownloadFailed) and result.step == "resolve"
    assert f"{GATED} on {hub.endpoint} is gated" in result.reason

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    code, output, result = run(hub, tmp_path, GATED, "main", "--token-file", str(token_file))
    assert code == 0, output
    assert isinstance(result, DownloadSucceeded)
    assert f"Bearer {TOKEN}" in hub.hub.tokens_seen()
    assert TOKEN not in output and TOKEN not in (tmp_path / "termination-log").read_text()
    assert TOKEN not in "".join(p.read_text(errors="replace") for p in (tmp_path / "cache").rglob("*.json"))


def test_an_unreachable_hub_is_named(tmp_path: Path) -> None:
    with HubServer(Hub()) as server:
        gone = server  # its port is closed once the block ends
    code, _, result = run(gone, tmp_path, REPO, "main")
    assert code == 1 and isinstance(result, DownloadFailed) and result.step == "resolve"
    assert result.reason.startswith(f"cannot reach {gone.endpoint}: ")


def test_a_plan_whose_key_is_not_its_revisions_is_refused(tmp_path: Path) -> None:
    bad = DownloadPlan(key="0" * 20, repo=REPO, revision="main").model_dump_json()
    process = subprocess.run(
        [sys.executable, "-m", "engine_builder", "download", "--plan-json", bad,
         "--cache-dir", str(tmp_path / "c"), "--termination-log", str(tmp_path / "log")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert process.returncode == 1
    result = parse_termination_message((tmp_path / "log").read_text())
    assert isinstance(result, DownloadFailed) and "is not the key of" in result.reason


def test_the_hub_program_serves_a_directory_as_a_repository_whose_main_downloads(tmp_path: Path) -> None:
    """`hub.py --repository REPO=DIR`, as the local cluster's Hub pod runs it from a mounted ConfigMap."""
    from mmd_operator.knowledge import ModelType
    from mmd_testbed.localcluster import hub as local_hub
    from mmd_testbed.ports import free_port

    snapshot = tmp_path / "configmap"
    snapshot.mkdir()
    expected = local_hub.synthetic_snapshot(REPO, ModelType.QWEN2_5_VL)
    for name, content in expected.items():
        (snapshot / name).write_bytes(content)
    (snapshot / "..data").mkdir()  # a ConfigMap volume's own entry: not a file of the repository
    port = free_port()
    program = Path(build_tools.__file__).parent / "hub.py"
    server = subprocess.Popen(
        [sys.executable, str(program), "--port", str(port), "--repository", f"{REPO}={snapshot}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert server.stdout is not None
        lines = [server.stdout.readline(), server.stdout.readline()]
        assert lines[1].startswith(f"hub: serving on 127.0.0.1:{port}"), lines
        code, output, result = run(f"http://127.0.0.1:{port}", tmp_path, REPO, "main")
        assert code == 0, output
        assert isinstance(result, DownloadSucceeded) and f"main = {result.commit}:" in lines[0]
        directory = tmp_path / "cache" / result.snapshot_key / snapshot_directory(REPO)
        assert {path.name: path.read_bytes() for path in directory.iterdir()} == expected
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=10)
    # One line per request, with the client's address: the pod log shows who fetched what.
    assert f'"GET /{REPO}/resolve/{result.commit}/config.json HTTP/1.1" 200' in output, output
