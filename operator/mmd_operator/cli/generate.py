"""`mmctl generate`: write every generated file from its one source.

- the CRD, from the pydantic API models;
- the Helm chart's values.yaml, values.schema.json and CRD template (`chart`);
- `docs/configuration.md`, every operator setting and chart value (`chart`);
- Triton's `model_config.proto` as a compiled descriptor for the plan layer's repository check, from the
  one tritonclient ships (so the operator needs only the protobuf runtime).

Run from the repository root (`make generate`); a unit test fails when the committed files drift.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2

from mmd_operator.api import crdgen
from mmd_operator.cli import chart
from mmd_operator.cli.localcluster.binaries import ensure_binaries
from mmd_operator.cli.localcluster.layout import Layout
from mmd_operator.plan import repository_check

_PLAN_PACKAGE = Path("operator", "mmd_operator", "plan")


def generated_files(root: Path) -> dict[str, str | bytes]:
    """Generated files, relative to the repository `root`, with their contents."""
    return {
        f"crds/{crdgen.CRD_FILE_NAME}": crdgen.render_yaml(),
        str(
            _PLAN_PACKAGE / repository_check.MODEL_CONFIG_DESCRIPTOR
        ): model_config_pb2.DESCRIPTOR.serialized_pb,
        **chart.generated_files(),
        chart.ARGOCD_CONFIG: chart.argocd_config((root / chart.ARGOCD_HEALTH).read_text()),
        chart.CONFIGURATION_DOC: chart.configuration_doc((root / chart.DEPLOYMENT_TEMPLATE).read_text()),
    }


def run(args: argparse.Namespace) -> int:
    """Handle `mmctl generate`."""
    root = Path(args.root)
    for relative, content in generated_files(root).items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
        print(f"wrote {target}")
    if args.manifests:
        binaries = ensure_binaries(Layout.discover())
        target = root / chart.PLAIN_MANIFESTS
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(chart.plain_manifests(binaries.path("helm"), root))
        print(f"wrote {target}")
    return 0


def register(subparsers: Any) -> None:
    """Add `generate` to `subparsers`."""
    parser = subparsers.add_parser("generate", help="write the CRD and the other generated files")
    parser.add_argument("--root", default=".", help="repository root (default: current directory)")
    parser.add_argument(
        "--manifests",
        action="store_true",
        help=f"also write {chart.PLAIN_MANIFESTS} with helm (built with the local control plane if missing)",
    )
    parser.set_defaults(handler=run)
