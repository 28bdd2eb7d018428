"""`mmd_resources{phase}`: how many resources are in each phase, as phases change and resources go."""

from __future__ import annotations

from prometheus_client import REGISTRY

from mmd_operator.api.v1alpha1 import Phase
from mmd_operator.metrics import PhaseTally


def _published() -> dict[str, float]:
    return {
        str(phase): REGISTRY.get_sample_value("mmd_resources", {"phase": str(phase)}) or 0.0
        for phase in Phase
    }


def test_the_counts_follow_each_resource_s_phase_and_its_deletion() -> None:
    tally = PhaseTally()
    assert set(_published().values()) == {0.0}
    tally.publish(("ml", "a"), Phase.DEPLOYING)
    tally.publish(("ml", "b"), Phase.DEPLOYING)
    tally.publish(("other", "a"), Phase.BUILDING)
    tally.publish(("ml", "a"), Phase.READY)
    tally.publish(("ml", "a"), Phase.READY)  # a reconcile that changed nothing
    tally.publish(("ml", "gone"), None)  # never seen: nothing to take away
    assert {k: v for k, v in _published().items() if v} == {"Deploying": 1, "Building": 1, "Ready": 1}
    tally.publish(("ml", "b"), None)
    tally.publish(("other", "a"), Phase.FAILED)
    assert {k: v for k, v in _published().items() if v} == {"Failed": 1, "Ready": 1}
    assert tally.known() == {("ml", "a"), ("other", "a")}
