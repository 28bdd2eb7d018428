"""The observability tier: the chart's alerting rules under the real promtool, and the chart's dashboard,
alert and scrape objects as the real helm renders them.

promtool is built with the local cluster's metrics path (`metricsbinaries`: the same Prometheus module and
version as the local cluster's Prometheus), helm with its control plane; both are built, or found in their
caches, right after collection, outside any test, so the per-test timeout does not count a cold build.
Nothing here starts a cluster.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mmd_testbed.localcluster.binaries import ensure_binaries
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.metricsbinaries import ensure_metrics_binaries
from tests.support.progress import terminal_printer

_TIER = Path(__file__).parent


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(_TIER in Path(str(item.path)).parents for item in session.items):
        say = terminal_printer(session.config)
        layout = Layout.discover()
        ensure_metrics_binaries(layout, say=say)
        ensure_binaries(layout, say=say)


@pytest.fixture(scope="session")
def promtool() -> Path:
    return ensure_metrics_binaries(Layout.discover()).path("promtool")


@pytest.fixture(scope="session")
def helm() -> Path:
    return ensure_binaries(Layout.discover()).path("helm")
