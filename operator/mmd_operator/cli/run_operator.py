"""`mmctl operator`: run the operator against the current kubeconfig, as the operator image does.

(Named `run_operator`, not `operator`, so nothing can mistake it for the standard library module.)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mmd_operator import main as operator_main
from mmd_operator.config import ConfigError


def run(args: argparse.Namespace) -> int:
    """Handle `mmctl operator`."""
    try:
        config = operator_main.config_from(args)
    except ConfigError as error:
        print(f"mmctl operator: {error}", file=sys.stderr)
        return 2
    return operator_main.run(config)


def register(subparsers: Any) -> None:
    """Add `operator` to `subparsers`."""
    parser = subparsers.add_parser(
        "operator",
        help="run the operator against the current kubeconfig",
        description="Run the MultimodalDeployment operator (the entry point of the operator image) against "
        "the current kubeconfig, in the given namespaces or all of them.",
    )
    operator_main.add_arguments(parser)
    parser.set_defaults(handler=run)
