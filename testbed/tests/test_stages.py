"""The kwok stages' success lines, filled in as Go's printf fills them: each parses as the real Job's
termination message, whatever order the report's fields are serialised in."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from engine_builder import result_format, weights_format
from engine_builder.result_format import BuildSucceeded
from engine_builder.weights_format import DownloadSucceeded
from mmd_testbed.localcluster.stages import _build_success_format, _download_success_format

_VERB = re.compile(r"%\[(\d+)\]([sd])|%%")


def go_printf(format_: str, arguments: Sequence[object]) -> str:
    """Go's printf for the verbs the stages use: %[n]s, %[n]d and %%; anything else is refused."""
    leftover = _VERB.sub("", format_)
    assert "%" not in leftover, f"a verb the stages do not use: {format_}"

    def fill(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%"
        value = arguments[int(match.group(1)) - 1]
        assert isinstance(value, str if match.group(2) == "s" else int), (match.group(0), value)
        return str(value)

    return _VERB.sub(fill, format_)


def test_the_builders_success_line_is_the_builders_report() -> None:
    key = "0123456789abcdef0123"
    line = go_printf(_build_success_format("NVIDIA A100", "8.0"), [json.dumps(key), 2, 41])
    report = result_format.parse_termination_message(line)
    assert isinstance(report, BuildSucceeded), report
    assert (report.cache_key, report.gpu.count, report.seconds) == (key, 2, 41.0)


def test_the_downloads_success_line_is_the_downloads_report() -> None:
    values = ["582951a3c67bce9bdc9b", "Qwen/Qwen2.5-VL-3B-Instruct", "main", "f" * 40, "0a1b2c3d4e5f60718293"]
    line = go_printf(_download_success_format(), [*map(json.dumps, values), 7])
    report = weights_format.parse_termination_message(line)
    assert isinstance(report, DownloadSucceeded), report
    assert [report.key, report.repo, report.revision, report.commit, report.snapshot_key] == values
    assert report.seconds == 7.0
