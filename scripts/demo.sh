#!/usr/bin/env bash
# `make demo`: the operator's main job on the local control plane (see scripts/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python scripts/demo.py "$@"
