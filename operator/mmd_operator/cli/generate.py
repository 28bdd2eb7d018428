"""`mmctl generate`: write every generated file (the CRD) from the pydantic models.

Run from the repository root (`make generate`); a unit test fails when the committed files drift.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mmd_operator.api import crdgen


def generated_files() -> dict[str, str]:
    """Generated files, relative to the repository root, with their contents."""
    return {f"crds/{crdgen.CRD_FILE_NAME}": crdgen.render_yaml()}


def run(args: argparse.Namespace) -> int:
    """Handle `mmctl generate`."""
    root = Path(args.root)
    for relative, content in generated_files().items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        print(f"wrote {target}")
    return 0


def register(subparsers: Any) -> None:
    """Add `generate` to `subparsers`."""
    parser = subparsers.add_parser("generate", help="write the CRD generated from the API models")
    parser.add_argument("--root", default=".", help="repository root (default: current directory)")
    parser.set_defaults(handler=run)
