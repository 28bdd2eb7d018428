"""The engine index's ConfigMap format: one JSON success summary per cacheKey."""

from __future__ import annotations

from engine_builder.result_format import termination_message
from mmd_operator.kube.engine_index import EngineIndex
from tests.support.builds import summary

SUMMARY = summary()


def test_the_engine_index_records_summaries_and_round_trips_through_configmap_data() -> None:
    index = EngineIndex().record(SUMMARY.model_copy(update={"cache_hit": True}))
    stored = index.get(SUMMARY.cache_key)
    assert stored == SUMMARY  # stored as the build, not as the hit that reported it
    assert index.get("other") is None

    data = index.to_configmap_data()
    assert list(data) == [SUMMARY.cache_key]
    assert EngineIndex.from_configmap_data(data) == index
    assert EngineIndex.from_configmap_data(None) == EngineIndex()


def test_unreadable_index_entries_are_left_out_so_the_key_is_rebuilt_or_found_again() -> None:
    good = termination_message(SUMMARY)
    data = {SUMMARY.cache_key: good, "broken": "{not json", "swapped": good}
    assert EngineIndex.from_configmap_data(data).entries == {SUMMARY.cache_key: SUMMARY}
