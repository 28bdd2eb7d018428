"""Progress lines that reach the terminal while a test tier sets itself up (past pytest's capture)."""

from __future__ import annotations

from collections.abc import Callable

import pytest


def terminal_printer(config: pytest.Config) -> Callable[[str], None]:
    """Return a printer that shows a line live, even while pytest captures output."""
    capture = config.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:
        if capture is None:
            print(line, flush=True)
            return
        with capture.global_and_fixture_disabled():
            print(line, flush=True)

    return say
