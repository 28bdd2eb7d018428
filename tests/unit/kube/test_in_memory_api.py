"""The in-memory API server keeps the contract the cluster tier checks the real one against.

A behaviour the unit tier's I/O tests rely on is a case of `tests.support.api_contract`; the same case runs
against kube-apiserver in `tests/cluster/test_api_contract.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from mmd_operator.vocabulary import kinds
from tests.support.api_contract import CASES, Subject
from tests.support.in_memory_api import InMemoryApiServer


def _at_once(what: str, check: Callable[[], Any]) -> Any:
    found = check()
    assert found, f"the in-memory server did not at once: {what}"
    return found


def subject_of(server: InMemoryApiServer, namespace: str = "contract") -> Subject:
    def watch(since: str, count: int) -> list[tuple[str, str]]:
        seen = [
            (e.type, e.object["metadata"]["name"]) for e in server.watch(kinds.CONFIGMAP, namespace, since)
        ]
        assert len(seen) >= count
        return seen

    return Subject(namespace=namespace, client=server.client, eventually=_at_once, watch_configmaps=watch)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__)
def test_the_in_memory_api_server_keeps_the_contract(case: Callable[[Subject], None]) -> None:
    case(subject_of(InMemoryApiServer()))
