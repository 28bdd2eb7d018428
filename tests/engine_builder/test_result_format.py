"""The result line the operator reads from the pod status, and its parser."""

from __future__ import annotations

import pytest

from engine_builder.job_report import REASON_LIMIT, TERMINATION_MESSAGE_LIMIT
from engine_builder.plan_runner import last_error_line
from engine_builder.result_format import (
    BuildFailed,
    parse_termination_message,
    termination_message,
)
from tests.support.builds import summary

SUMMARY = summary()


def test_a_success_summary_is_one_short_json_line_that_parses_back() -> None:
    message = termination_message(SUMMARY)
    assert "\n" not in message and len(message.encode()) < 1024
    assert parse_termination_message(message + "\n") == SUMMARY


def test_a_failure_reason_is_clipped_so_the_message_stays_far_below_the_kubernetes_limit() -> None:
    failure = BuildFailed(cache_key="k" * 128, step="build-llm", exit_code=1, reason="错误 " * 5000)
    message = termination_message(failure)
    assert len(message.encode()) < TERMINATION_MESSAGE_LIMIT // 2
    parsed = parse_termination_message(message)
    assert isinstance(parsed, BuildFailed)
    assert len(parsed.reason) == REASON_LIMIT and parsed.reason.endswith("…")
    assert parsed.step == "build-llm" and parsed.exit_code == 1


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (None, "the build container left no termination message"),
        ("", "the build container left no termination message"),
        ("Traceback (most recent call last):\nMemoryError\n", "MemoryError"),
        ('{"result": "maybe"}', '{"result": "maybe"}'),
    ],
)
def test_anything_else_in_the_termination_message_is_a_failure_that_says_what_it_saw(
    text: str | None, reason: str
) -> None:
    # What kubelet puts there for a crash under terminationMessagePolicy: FallbackToLogsOnError.
    assert parse_termination_message(text) == BuildFailed(reason=reason)


def test_the_last_result_line_wins_over_log_lines_around_it() -> None:
    text = f"some log line\n{termination_message(SUMMARY)}\n"
    assert parse_termination_message(text) == SUMMARY


@pytest.mark.parametrize(
    ("lines", "line"),
    [
        (["loading", "Traceback (most recent call last):", '  File "x"', "OSError: bad"], "OSError: bad"),
        (["[E] CUDA out of memory", "cleaning up", "bye"], "[E] CUDA out of memory"),
        (["all quiet", "", "last words"], "last words"),
        ([], "(the step printed nothing)"),
    ],
)  # fmt: skip
def test_the_line_that_explains_a_failure_is_picked_from_the_output(lines: list[str], line: str) -> None:
    assert last_error_line(lines) == line
