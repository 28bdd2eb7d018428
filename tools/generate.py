"""`make generate` (`python -m tools.generate`): write every generated file from its one source.

- the CRD, from the pydantic API models;
- the Helm chart's values.yaml, values.schema.json and CRD template (`chart`);
- `docs/configuration.md`, every operator setting and chart value (`chart`);
- the chart's Grafana dashboard, from the operator's scaling-metric table (`dashboard`);
- Triton's `model_config.proto` as a compiled descriptor for the plan layer's repository check, from the
  one tritonclient ships (so the operator needs only the protobuf runtime).

Run from the repository root; a unit test fails when the committed files drift. `--manifests` also writes
the plain manifests with helm, which the test bed's local cluster builds. Maintainer tooling, shipped in no
distribution.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from mmd_operator.api import crdgen
from mmd_operator.plan import repository_check
from mmd_testbed.localcluster.binaries import ensure_binaries
from mmd_testbed.localcluster.layout import Layout
from tools import chart, configuration_doc, dashboard

_PLAN_PACKAGE = Path("operator", "mmd_operator", "plan")


def generated_files(root: Path) -> dict[str, str | bytes]:
    """Generated files, relative to the repository `root`, with their contents."""
    return {
        f"crds/{crdgen.CRD_FILE_NAME}": crdgen.render_yaml(),
        str(
            _PLAN_PACKAGE / repository_check.MODEL_CONFIG_DESCRIPTOR
        ): model_config_pb2.DESCRIPTOR.serialized_pb,
        **chart.generated_files(),
        **dashboard.generated_files(),
        chart.ARGOCD_CONFIG: chart.argocd_config((root / chart.ARGOCD_HEALTH).read_text()),
        configuration_doc.CONFIGURATION_DOC: configuration_doc.configuration_doc(
            (root / configuration_doc.DEPLOYMENT_TEMPLATE).read_text()
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Write every generated file under `--root`."""
    parser = argparse.ArgumentParser(prog="python -m tools.generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="repository root (default: current directory)")
    parser.add_argument(
        "--manifests",
        action="store_true",
        help=f"also write {chart.PLAIN_MANIFESTS} with helm (built with the local control plane if missing)",
    )
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
