"""The GitOps tier: objects judged by the real kstatus library and an Argo CD style Lua health check.

The checker (testbed/go/gitops) is built, or found in the cache, right after collection, outside any test,
so the per-test timeout does not count a cold build.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mmd_testbed.localcluster.gitops_check import ensure_gitops_check
from mmd_testbed.localcluster.layout import Layout
from tests.support.progress import terminal_printer

_GITOPS_DIR = Path(__file__).parent


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(_GITOPS_DIR in Path(str(item.path)).parents for item in session.items):
        ensure_gitops_check(Layout.discover(), say=terminal_printer(session.config))


@pytest.fixture(scope="session")
def gitops_check() -> Path:
    return ensure_gitops_check(Layout.discover())
