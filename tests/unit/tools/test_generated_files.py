"""`make generate` output is committed; a change to its source without `make generate` fails here."""

from __future__ import annotations

from pathlib import Path

from tools.generate import generated_files

ROOT = Path(__file__).resolve().parents[3]


def test_committed_generated_files_do_not_drift() -> None:
    files = generated_files(ROOT)
    assert {"crds/serving.multimodal.dev_multimodaldeployments.yaml"} < set(files)
    for relative, content in files.items():
        committed = (ROOT / relative).read_bytes()
        expected = content.encode() if isinstance(content, str) else content
        assert committed == expected, f"{relative} is stale; run `make generate`"
