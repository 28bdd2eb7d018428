#!/usr/bin/env bash
# The operator's runtime works with the base dependencies alone (no `cli` extra): install the project
# without extras into a separate virtualenv and plan every example there, as the operator image would.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${1:-.venv-runtime}
echo "==> runtime dependencies only: installing the project without extras into $VENV"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet .
"$VENV/bin/python" - <<'PY'
import importlib.metadata as metadata
import pathlib

import yaml

import mmd_operator.api
import mmd_operator.kube.engine_index
import mmd_operator.plan
from mmd_operator.plan.resource_plan import plan_resource

for extra in ("numpy", "tritonclient", "PIL", "soundfile", "jiwer", "cryptography", "psutil"):
    try:
        metadata.distribution({"PIL": "pillow"}.get(extra, extra))
    except metadata.PackageNotFoundError:
        continue
    raise SystemExit(f"{extra} is installed without the cli extra: a base dependency pulls it in")
examples = sorted(pathlib.Path("examples").glob("*.yaml"))
for path in examples:
    plan_resource(yaml.safe_load(path.read_text()))
print(f"    planned {len(examples)} examples with the base dependencies only")
PY
# mmctl is installed too, but its sub-commands need the cli extra: one clear line, not a traceback.
if "$VENV/bin/mmctl" --help > /tmp/mmctl-base.$$ 2>&1; then
    echo "mmctl ran without the cli extra" >&2; exit 1
fi
grep -q "mmctl needs the cli extra (missing .*): pip install 'mmd-operator\[cli\]'" /tmp/mmctl-base.$$ || {
    cat /tmp/mmctl-base.$$ >&2; exit 1; }
rm -f /tmp/mmctl-base.$$
echo "    mmctl without the cli extra says what to install"
