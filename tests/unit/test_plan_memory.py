"""The operator holds a resource's plan while some resource has that spec, and not after.

A plan (settings, limits, rendered repository, build and launch plans) is about 55 KiB; specs change all
day, and an LRU of 2048 plans held plans of specs nobody had any more (up to 110 MiB). Tested on the real
Reconciler, whose client is never called here: planning is pure.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from mmd_operator.config import OperatorConfig
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import KubeClient
from mmd_operator.plan_memory import Use
from mmd_operator.reconcile import Reconciler

LLAVA = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "llava.yaml").read_text())


def _body(name: str, queue_delay: int) -> dict[str, Any]:
    body = copy.deepcopy(LLAVA)
    body["metadata"] = {"name": name, "namespace": "ml", "generation": queue_delay}
    body["spec"].setdefault("serving", {})["queue"] = {"maxQueueDelayMicroseconds": queue_delay}
    return body


@pytest.fixture
def reconciler() -> Iterator[Reconciler]:
    offline = KubeClient(k8s.ApiClient(k8s.Configuration()), field_manager="mmd-operator")
    made = Reconciler(offline, cached.Cache(), OperatorConfig())
    yield made
    made.events.close()


def test_plans_of_specs_nobody_has_any_more_are_let_go(reconciler: Reconciler) -> None:
    names = ("a", "b", "c")
    for round_number in range(1, 21):  # 60 plans made, the last 3 still wanted
        for index, name in enumerate(names):
            assert not isinstance(reconciler.plans.plan(_body(name, 10 * round_number + index)), Exception)
    assert reconciler.plans.held == 3
    for name in names:
        reconciler.forget("ml", name)
    assert reconciler.plans.held == 0


def test_resources_with_one_spec_share_its_plan_until_the_last_one_goes(reconciler: Reconciler) -> None:
    first = reconciler.plans.plan(_body("a", 7))
    assert not isinstance(first, Exception)
    assert reconciler.plans.plan(_body("b", 7))[1] is first[1]  # the same plan object: not planned again
    reconciler.forget("ml", "a")
    assert reconciler.plans.plan(_body("c", 7))[1] is first[1]  # "b" still holds it
    reconciler.forget("ml", "b")
    reconciler.forget("ml", "c")
    assert reconciler.plans.plan(_body("d", 7))[1] is not first[1]  # planned again: nobody held it


def test_bookkeeping_left_by_a_deletion_during_a_reconcile_goes_at_the_resync(reconciler: Reconciler) -> None:
    reconciler.plans.plan(_body("a", 1))
    reconciler.plans.plan(_body("b", 2))
    assert reconciler.plans.held == 2
    reconciler.forget_all_but([("ml", "b")])  # "a" was deleted while its reconcile ran
    assert reconciler.plans.held == 1


def test_the_users_of_an_engine_and_a_claim_follow_each_resource_s_plan(reconciler: Reconciler) -> None:
    plans = reconciler.plans
    assert plans.record_use(("ml", "a"), Use("k1", "cache")) is True  # first look at an engine
    assert plans.record_use(("ml", "b"), Use("k1", "cache")) is True
    assert plans.record_use(("other", "a"), Use("k1", "cache")) is True
    assert plans.record_use(("ml", "a"), Use("k1", "cache")) is False  # the same engine again
    assert plans.users_of_cache_key("ml", "k1") == ["a", "b"]
    assert plans.record_use(("ml", "a"), Use("k2", "other-cache")) is True  # a spec change: a new engine
    assert plans.users_of_cache_key("ml", "k1") == ["b"]
    assert plans.users_of_cache_key("ml", "k2") == ["a"]
    assert (plans.users_of_claim("ml", "cache"), plans.users_of_claim("ml", "other-cache")) == (["b"], ["a"])
    assert plans.record_use(("ml", "c"), Use("k2", "cache")) is True  # k2's engine in another claim
    # A build Job concerns the users of its engine in its claim: not all the claim's, not all the key's.
    assert plans.users_of_engine("ml", "k2", "cache") == ["c"]
    assert plans.users_of_engine("ml", "k2", "other-cache") == ["a"]
    assert plans.users_of_engine("ml", "k1", "other-cache") == []
    assert plans.users_of_claim("ml", "cache") == ["b", "c"]
    reconciler.forget("ml", "c")
    reconciler.forget("ml", "b")
    assert plans.users_of_cache_key("ml", "k1") == [] and plans.users_of_claim("ml", "cache") == []
    assert plans.users_of_cache_key("other", "k1") == ["a"]
