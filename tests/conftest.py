"""Shared pytest options for every tier; every session unmounts what dead sessions left mounted (see
tests/support/leftovers.py) before it starts and again before pytest's own clean-up of old directories."""

from __future__ import annotations

import getpass
import tempfile
from pathlib import Path

import pytest

from tests.support.leftovers import unmount_dead_sessions


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden files from the current output instead of comparing",
    )


def _pytest_root() -> Path:
    return Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"


def pytest_sessionstart(session: pytest.Session) -> None:
    unmount_dead_sessions(_pytest_root())


def pytest_unconfigure(config: pytest.Config) -> None:
    # pytest deletes old numbered directories after this hook, through the config's clean-up stack.
    unmount_dead_sessions(_pytest_root())
