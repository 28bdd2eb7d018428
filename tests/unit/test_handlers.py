"""How the operator sets kopf up: its watches retry a failing request without end, never giving up."""

from __future__ import annotations

import itertools

import kopf

from mmd_operator.config import OperatorConfig
from mmd_operator.handlers import configure


def test_a_failing_watch_request_is_retried_without_end_at_most_ten_seconds_apart() -> None:
    settings = kopf.OperatorSettings()
    configure(settings, OperatorConfig())
    backoffs = settings.networking.error_backoffs
    assert not isinstance(backoffs, (int, float))
    # kopf counts the attempts only of a sized list and gives up at its end; this one has neither.
    assert not hasattr(backoffs, "__len__")
    first_hour = list(itertools.islice(backoffs, 400))
    assert first_hour[:5] == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert max(first_hour) == 10.0 and sum(first_hour) > 3600
    # Every request starts again from the shortest delay (kopf iterates it once per request).
    assert list(itertools.islice(backoffs, 3)) == [1.0, 2.0, 4.0]


def test_kopf_s_watch_streams_parse_events_with_orjson_into_the_same_dicts() -> None:
    import json

    import kopf._cogs.clients.api as kopf_api
    import orjson

    configure(kopf.OperatorSettings(), OperatorConfig())
    assert kopf_api.json.loads is orjson.loads  # type: ignore[attr-defined]
    line = '{"type":"MODIFIED","object":{"metadata":{"name":"llava-é"},"n":[1,2.5,null,true,"12"]}}'
    assert kopf_api.json.loads(line) == json.loads(line)  # type: ignore[attr-defined]
