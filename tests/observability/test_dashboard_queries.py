"""Every query of the chart's Grafana dashboard is PromQL the pinned Prometheus parses, as Grafana sends it
(the template variables and the rate window filled in): promtool checks each as a recording rule. That the
queries find series on a real Prometheus is tests/pods/test_observability.py's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tools import dashboard

ROOT = Path(__file__).resolve().parents[2]


def test_promtool_parses_every_dashboard_query(promtool: Path, tmp_path: Path) -> None:
    committed = json.loads((ROOT / dashboard.DASHBOARD_FILE).read_text())
    records = [
        {
            "record": f"dashboard:panel_{panel['id']}:{target['refId']}",
            "expr": dashboard.concrete(target["expr"], "ml", "llava"),
        }
        for panel in committed["panels"]
        for target in panel.get("targets", [])
    ]
    assert len(records) >= 20
    rules = tmp_path / "dashboard.yaml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}, sort_keys=False))
    checked = subprocess.run(
        [str(promtool), "check", "rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(records)} rules found" in checked.stdout
