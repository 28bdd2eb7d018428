"""`mmctl cluster`: the local Kubernetes control plane (filled in by the control-plane work)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    """Add the `cluster` sub-command to `subparsers`."""
    parser: argparse.ArgumentParser = subparsers.add_parser("cluster", help="local control plane")
    parser.set_defaults(handler=lambda _args: 2)
