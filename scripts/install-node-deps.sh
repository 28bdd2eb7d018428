#!/usr/bin/env bash
# Installs what real nodes of the local cluster need from Debian, idempotently and quietly (root needed):
#
#   runc            the OCI runtime containerd starts containers with (crun refuses this host's hybrid
#                   cgroup layout; runc needs cgo and libseccomp, so it is not built from the Go proxy)
#   iptables ipset  what kube-proxy and kube-router program, inside each node's network namespace
#   buildah         builds the Dockerfile's images without a daemon or a registry
#   mmdebstrap      makes the Debian base images
#   busybox-static  the busybox image (volume helper pods, test clients)
#
# Everything else a real node runs is built from the Go module proxy (`python -m mmd_testbed cluster build --nodes`).
# Usage: scripts/install-node-deps.sh
set -euo pipefail

PACKAGES=(runc iptables ipset buildah mmdebstrap busybox-static)
missing=()
for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "==> installing ${missing[*]} (Debian packages for the local cluster's real nodes)"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "install-node-deps: installing ${missing[*]} needs root" >&2
        exit 1
    fi
    SUDO="sudo -n"
fi
LOG=$(mktemp)
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$LOG" 2>&1; then
    # A fresh machine has no package lists yet.
    if ! { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$LOG" 2>&1; then
        cat "$LOG" >&2
        echo "install-node-deps: could not install ${missing[*]}" >&2
        exit 1
    fi
fi
rm -f "$LOG"
