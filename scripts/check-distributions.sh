#!/usr/bin/env bash
# Each distribution installed alone, as its image or its users install it (CONTRIBUTING.md, "Layout"):
#
#   .venv-dist-operator  mmd-engine-builder + mmd-operator (what the operator image installs), then mmctl
#                        without extras (a user's base install);
#   .venv-dist-builder   mmd-engine-builder[download] (the builder image's, less its GPU packages);
#   a fresh venv         the README's `pip install` lines exactly as written, run from the repository root
#                        with impostors of our three names on a find-links index beside PyPI: none of
#                        them may be installed (this project registers no name on an index).
#
# Checks: the wheels hold only their own packages (no test-bed file in the operator's); the operator plans
# every example without mmctl's or the test bed's libraries; mmctl's base install runs `validate` and
# `render` and names the extra a command needs when it is missing; the builder's closure has no kopf, no
# kubernetes client and none of the operator, and its program starts; the README's install lines give a
# `mmctl` whose `--version` and `validate` run. Each .venv-dist-* is reused while the pyproject files are
# unchanged; the README's venv is made anew every time.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DIGEST=$(cat pyproject.toml operator/pyproject.toml engine_builder/pyproject.toml cli/pyproject.toml \
    | sha256sum | cut -c1-12)
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT

fresh_venv() {  # fresh_venv DIR: a new virtualenv unless DIR was made for these pyproject files
    if [ -f "$1/.made-$DIGEST" ]; then return 1; fi
    rm -rf "$1"
    "$PYTHON" -m venv "$1"
    "$1/bin/python" -m pip install --quiet --upgrade pip
    touch "$1/.made-$DIGEST"
}

echo "==> the wheels of the operator, the builder and mmctl hold only their own packages"
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$WHEELS" ./engine_builder ./operator ./cli ./testbed
"$PYTHON" - "$WHEELS" <<'PY'
import sys, zipfile
from pathlib import Path

owners = {"mmd_operator": "mmd_operator/", "mmd_engine_builder": "engine_builder/", "mmctl": "mmctl/",
          "mmd_testbed": "mmd_testbed/"}
for wheel in sorted(Path(sys.argv[1]).glob("*.whl")):
    dist = wheel.name.split("-")[0]
    names = [n for n in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in n]
    foreign = [n for n in names if not n.startswith(owners[dist])]
    if foreign:
        raise SystemExit(f"{wheel.name} holds files of other packages: {foreign[:5]}")
    print(f"    {wheel.name}: {len(names)} files, all under {owners[dist]}")
PY

VENV=.venv-dist-operator
if fresh_venv "$VENV"; then
    "$VENV/bin/python" -m pip install --quiet --find-links "$WHEELS" ./engine_builder ./operator
fi
echo "==> the operator alone ($VENV): its dependencies, every example planned"
"$VENV/bin/python" -P - <<'PY'
import importlib.metadata as metadata
import importlib.util
import pathlib

import yaml

from mmd_operator.plan.resource_plan import plan_resource

# (click is kopf's own dependency; cryptography the operator's own, for the SSH keys of a replica across pods.)
for extra in ("numpy", "tritonclient", "pillow", "soundfile", "jiwer", "psutil", "openai",
              "huggingface_hub", "mmctl", "mmd-testbed"):
    try:
        metadata.distribution(extra)
    except metadata.PackageNotFoundError:
        continue
    raise SystemExit(f"{extra} is installed with mmd-operator: a dependency of the operator pulls it in")
for package in ("mmctl", "mmd_testbed", "tools"):
    if importlib.util.find_spec(package) is not None:
        raise SystemExit(f"{package} is importable beside the operator alone")
examples = sorted(pathlib.Path("examples").glob("*.yaml"))
for path in examples:
    plan_resource(yaml.safe_load(path.read_text()))
print(f"    planned {len(examples)} examples with the operator's own dependencies")
PY

echo "==> mmctl without extras ($VENV): validate and render run, the other commands name their extra"
"$VENV/bin/python" -m pip install --quiet --no-deps ./cli
"$VENV/bin/mmctl" validate -f examples/ > /dev/null
"$VENV/bin/mmctl" render -f examples/llava.yaml -o "$WHEELS/render" > /dev/null
for command in "infer triton" "eval-asr asr" "chat chat"; do
    set -- $command
    if "$VENV/bin/mmctl" "$1" --help > "$WHEELS/out" 2>&1; then
        echo "mmctl $1 ran without its extra" >&2; exit 1
    fi
    grep -qF "mmctl $1 needs the $2 extra (missing " "$WHEELS/out" \
        && grep -qF "from the root of a checkout: pip install ./engine_builder ./operator './cli[$2]'" "$WHEELS/out" || {
        cat "$WHEELS/out" >&2; exit 1; }
done
echo "    mmctl validate and render ran; infer, eval-asr and chat named their extras"

VENV=.venv-dist-builder
if fresh_venv "$VENV"; then
    "$VENV/bin/python" -m pip install --quiet "./engine_builder[download]"
fi
echo "==> the builder alone ($VENV): no kopf, no kubernetes client, no operator; the program starts"
"$VENV/bin/python" -P - <<'PY'
import importlib
import importlib.metadata as metadata
import pkgutil

import engine_builder

for other in ("kopf", "kubernetes", "mmd-operator", "mmctl", "mmd-testbed", "prometheus-client"):
    try:
        metadata.distribution(other)
    except metadata.PackageNotFoundError:
        continue
    raise SystemExit(f"{other} is installed with mmd-engine-builder")
modules = [m.name for m in pkgutil.iter_modules(engine_builder.__path__) if m.name != "__main__"]
for name in modules:
    importlib.import_module(f"engine_builder.{name}")
print(f"    imported its {len(modules)} modules without the operator")
PY
"$VENV/bin/python" -m engine_builder --help > /dev/null
echo "    python -m engine_builder starts"

echo "==> the README's install lines, as written, in a fresh venv from the repository root"
mapfile -t INSTALL < <(grep -E '^pip install ' README.md)
if [ "${#INSTALL[@]}" -eq 0 ]; then echo "README.md has no line starting with 'pip install '" >&2; exit 1; fi
# Impostors of our names, at our version and above, on a find-links index pip reads beside PyPI: the
# README's lines name the checkout's paths, so pip must take none of them.
"$PYTHON" - "$WHEELS/impostors" <<'PY'
import sys
import zipfile
from pathlib import Path

target = Path(sys.argv[1])
target.mkdir()
for name in ("mmctl", "mmd_operator", "mmd_engine_builder"):
    for version in ("0.1.0", "99.0"):
        info = f"{name}-{version}.dist-info"
        files = {
            "impostor_was_installed.py": "",
            f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n",
            f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: impostor\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        }
        files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
        with zipfile.ZipFile(target / f"{name}-{version}-py3-none-any.whl", "w") as wheel:
            for path, text in files.items():
                wheel.writestr(path, text)
PY
README_VENV="$WHEELS/readme-venv"
"$PYTHON" -m venv "$README_VENV"
for line in "${INSTALL[@]}"; do
    echo "    \$ $line"
    PATH="$README_VENV/bin:$PATH" VIRTUAL_ENV="$README_VENV" PIP_FIND_LINKS="$WHEELS/impostors" \
        PIP_QUIET=1 PIP_DISABLE_PIP_VERSION_CHECK=1 bash -euo pipefail -c "$line"
done
if [ -n "$(find "$README_VENV" -name impostor_was_installed.py)" ]; then
    echo "an impostor of one of our names was installed by the README's lines" >&2; exit 1
fi
echo "    \$ mmctl --version: $("$README_VENV/bin/mmctl" --version)"
"$README_VENV/bin/mmctl" validate -f examples/llava.yaml > /dev/null
echo "    mmctl validate -f examples/llava.yaml: exit 0"
for extra in $(printf '%s\n' "${INSTALL[@]}" | grep -oE "cli\[[a-z,]+\]" | sed -E 's/^cli\[|\]$//g' | tr , ' '); do
    [ "$extra" = all ] && continue
    command=$extra; [ "$extra" = triton ] && command=infer; [ "$extra" = asr ] && command=eval-asr
    "$README_VENV/bin/mmctl" "$command" --help > /dev/null
    echo "    mmctl $command --help (the $extra extra): exit 0"
done
