"""`make test` refuses to start the real-pod tier on a disk that cannot hold it, and says why."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.prepare import _disk_problems


def test_too_little_free_disk_is_named_with_the_free_and_the_needed_figures(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free

    (problem,) = _disk_problems(tmp_path, free + 10**12)

    assert f"{free / 1e9:.1f} GB free on the file system of {tmp_path}" in problem
    assert f"needs about {(free + 10**12) / 1e9:.0f} GB" in problem
    assert _disk_problems(tmp_path, 1) == []
