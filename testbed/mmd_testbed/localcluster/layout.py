"""Where the local control plane lives on disk, and which versions it pins.

The versions are read from the wrapper Go modules in `testbed/go/controlplane/` so that their go.mod files
are the single source of truth. The binary cache is keyed by those versions, the Go toolchain and a
digest of the wrapper modules and build flags, so any change rebuilds and an unchanged tree reuses.

Imports: the standard library only.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

WRAPPER_MODULES = ("kubernetes", "kwok", "helm")

# The module each pinned version is read from, and the wrapper go.mod that pins it.
_PINNED_MODULES = {
    "kubernetes": ("kubernetes", "k8s.io/kubernetes"),
    "etcd": ("kubernetes", "go.etcd.io/etcd/server/v3"),
    "kwok": ("kwok", "sigs.k8s.io/kwok"),
    "helm": ("helm", "helm.sh/helm/v3"),
}

# Bump when the build recipe changes in a way the digest of the go.mod files cannot see.
BUILD_RECIPE_VERSION = "2"  # 2: binaries.GO_BUILD_FLAGS (no compiler DWARF)

# The node components: `kubernetes` is the control plane's wrapper (kubelet and kube-proxy are built from
# the same k8s.io/kubernetes), the others live in `testbed/go/nodes/`.
NODE_WRAPPER_MODULES = (
    "kubernetes",
    "containerd",
    "coredns",
    "kube-router",
    "local-path-provisioner",
    "pause",
)
_NODE_PINNED_MODULES = {
    "kubernetes": ("kubernetes", "k8s.io/kubernetes"),
    "containerd": ("containerd", "github.com/containerd/containerd/v2"),
    "cni_plugins": ("containerd", "github.com/containernetworking/plugins"),
    "coredns": ("coredns", "github.com/coredns/coredns"),
    "kube_router": ("kube-router", "github.com/cloudnativelabs/kube-router/v2"),
    "local_path_provisioner": ("local-path-provisioner", "github.com/rancher/local-path-provisioner"),
}
NODE_BUILD_RECIPE_VERSION = "2"

# The metrics path of `cluster up --metrics` (Prometheus and prometheus-adapter), in `testbed/go/metrics/`: a
# cache of its own, so neither the control plane nor the nodes rebuild when it changes.
METRICS_WRAPPER_MODULES = ("prometheus", "prometheus-adapter")
_METRICS_PINNED_MODULES = {
    "prometheus": ("prometheus", "github.com/prometheus/prometheus"),
    "prometheus_adapter": ("prometheus-adapter", "sigs.k8s.io/prometheus-adapter"),
}
METRICS_BUILD_RECIPE_VERSION = "2"

# The LeaderWorkerSet controller of `cluster up --lws`, in `testbed/go/lws/`: a cache of its own too.
LWS_MODULE = "sigs.k8s.io/lws"
LWS_BUILD_RECIPE_VERSION = "3"


class LayoutError(RuntimeError):
    """The repository, the Go toolchain or a pinned version cannot be found."""


def find_repo_root(start: Path | None = None) -> Path:
    """Return the checkout holding `testbed/go/controlplane/`: $MMD_REPO_ROOT, else above this file or cwd."""
    if env_root := os.environ.get("MMD_REPO_ROOT"):
        return Path(env_root).resolve()
    candidates = [Path(__file__).resolve(), (start or Path.cwd()).resolve()]
    for candidate in candidates:
        for directory in (candidate, *candidate.parents):
            if (directory / "testbed" / "go" / "controlplane" / "kubernetes" / "go.mod").is_file():
                return directory
    raise LayoutError(
        "cannot find testbed/go/controlplane/ (run from a checkout of mmd-operator or set MMD_REPO_ROOT)"
    )


def default_cache_root() -> Path:
    """Return the parent of the per-version binary caches (outside the repository)."""
    if override := os.environ.get("MMD_CONTROLPLANE_CACHE"):
        return Path(override).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser().resolve() / "mmd-operator" / "controlplane"


def default_state_dir(repo_root: Path) -> Path:
    """Return the local cluster's runtime directory (certs, kubeconfig, logs, pids, etcd data)."""
    if override := os.environ.get("MMD_CLUSTER_DIR"):
        return Path(override).expanduser().resolve()
    return repo_root / ".local" / "cluster"


def _pinned_version(go_mod: Path, module: str) -> str:
    pattern = re.compile(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", re.MULTILINE)
    match = pattern.search(go_mod.read_text())
    if match is None:
        raise LayoutError(f"{go_mod} does not require {module}")
    return match.group(1)


@dataclass(frozen=True)
class Versions:
    """The pinned component versions (with the leading `v`, as Go writes them)."""

    kubernetes: str
    etcd: str
    kwok: str
    helm: str

    @property
    def kubernetes_minor(self) -> int:
        """Return 34 for v1.34.10."""
        return int(self.kubernetes.lstrip("v").split(".")[1])

    def describe(self) -> str:
        """Return a short human-readable summary."""
        return f"kubernetes {self.kubernetes}, etcd {self.etcd}, kwok {self.kwok}, helm {self.helm}"


@dataclass(frozen=True)
class NodeVersions:
    """The pinned versions of what a real node runs besides the kubelet's Kubernetes."""

    kubernetes: str
    containerd: str
    cni_plugins: str
    coredns: str
    kube_router: str
    local_path_provisioner: str

    def describe(self) -> str:
        """Return a short human-readable summary."""
        return (
            f"kubelet {self.kubernetes}, containerd {self.containerd}, CNI plugins {self.cni_plugins}, "
            f"CoreDNS {self.coredns}, kube-router {self.kube_router}, "
            f"local-path-provisioner {self.local_path_provisioner}"
        )


@dataclass(frozen=True)
class MetricsVersions:
    """The pinned module versions of the metrics path (Go module versions, with the leading `v`)."""

    # Prometheus publishes v3.x.y as the Go module version v0.3xx.y.
    prometheus: str
    prometheus_adapter: str

    @property
    def prometheus_release(self) -> str:
        """The Prometheus release of the module version: 3.16.0 for v0.316.0."""
        _major, minor, patch = self.prometheus.lstrip("v").split(".")
        return f"{int(minor) // 100}.{int(minor) % 100}.{patch}"

    def describe(self) -> str:
        """Return a short human-readable summary."""
        return (
            f"Prometheus {self.prometheus_release} (module {self.prometheus}), "
            f"prometheus-adapter {self.prometheus_adapter}"
        )


@dataclass(frozen=True)
class LwsVersions:
    """The pinned module version of the LeaderWorkerSet controller (with the leading `v`)."""

    lws: str

    def describe(self) -> str:
        """Return a short human-readable summary."""
        return f"LeaderWorkerSet {self.lws}"


@dataclass(frozen=True)
class Toolchain:
    """The Go toolchain used for the build."""

    go: Path
    version: str  # e.g. go1.26.8

    @classmethod
    def discover(cls) -> Toolchain:
        """Find `go` on PATH (or $MMD_GO) and ask it for its version."""
        go = os.environ.get("MMD_GO") or shutil.which("go")
        if go is None:
            raise LayoutError(
                "the Go toolchain (`go`) is not on PATH; the control plane is built from source"
            )
        result = subprocess.run(
            [go, "env", "GOVERSION"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "GOTOOLCHAIN": "local"},
        )
        return cls(go=Path(go), version=result.stdout.strip())


@dataclass(frozen=True)
class Layout:
    """Paths of one checkout: the wrapper modules, the binary cache, the runtime state."""

    repo_root: Path
    cache_root: Path

    @classmethod
    def discover(cls) -> Layout:
        """Find the checkout and the default cache root."""
        return cls(repo_root=find_repo_root(), cache_root=default_cache_root())

    @property
    def tools_dir(self) -> Path:
        """Return `testbed/go/controlplane/`, which holds one wrapper Go module per sub-directory."""
        return self.repo_root / "testbed" / "go" / "controlplane"

    def wrapper_dir(self, name: str) -> Path:
        """Return the directory of the wrapper module `name` (kubernetes, kwok, helm)."""
        return self.tools_dir / name

    @cached_property
    def versions(self) -> Versions:
        """Read the pinned versions from the wrapper go.mod files."""
        found = {
            component: _pinned_version(self.wrapper_dir(wrapper) / "go.mod", module)
            for component, (wrapper, module) in _PINNED_MODULES.items()
        }
        return Versions(**found)

    def inputs_digest(self) -> str:
        """Digest the wrapper modules' go.mod/go.sum and the recipe version (12 hex digits)."""
        digest = hashlib.sha256(BUILD_RECIPE_VERSION.encode())
        for name in WRAPPER_MODULES:
            for file_name in ("go.mod", "go.sum"):
                path = self.wrapper_dir(name) / file_name
                digest.update(f"{name}/{file_name}\0".encode())
                digest.update(path.read_bytes())
        return digest.hexdigest()[:12]

    def cache_key(self, toolchain: Toolchain) -> str:
        """Return the directory name of this build in the cache, readable and exact."""
        v = self.versions
        return (
            f"k8s-{v.kubernetes}_etcd-{v.etcd}_kwok-{v.kwok}_helm-{v.helm}"
            f"_{toolchain.version}_{self.inputs_digest()}"
        )

    def cache_dir(self, toolchain: Toolchain) -> Path:
        """Return the cache directory of this build (it may not exist yet)."""
        return self.cache_root / self.cache_key(toolchain)

    # -- real nodes (kubelet, container runtime, network add-ons) --------------------------------

    @property
    def node_tools_dir(self) -> Path:
        """Return `testbed/go/nodes/`, the wrapper modules of the node components beside the kubelet."""
        return self.repo_root / "testbed" / "go" / "nodes"

    def node_wrapper_dir(self, name: str) -> Path:
        """Return the directory of wrapper module `name`: `kubernetes` is the control plane's."""
        return self.wrapper_dir(name) if name == "kubernetes" else self.node_tools_dir / name

    @cached_property
    def node_versions(self) -> NodeVersions:
        """Read the node components' pinned versions from their wrapper go.mod files."""
        found = {
            component: _pinned_version(self.node_wrapper_dir(wrapper) / "go.mod", module)
            for component, (wrapper, module) in _NODE_PINNED_MODULES.items()
        }
        return NodeVersions(**found)

    def node_inputs_digest(self) -> str:
        """Digest every node wrapper module's files and the node recipe version (12 hex digits)."""
        digest = hashlib.sha256(NODE_BUILD_RECIPE_VERSION.encode())
        for name in NODE_WRAPPER_MODULES:
            directory = self.node_wrapper_dir(name)
            for path in sorted(directory.iterdir()):
                if path.is_file():
                    digest.update(f"{name}/{path.name}\0".encode())
                    digest.update(path.read_bytes())
        return digest.hexdigest()[:12]

    def node_cache_dir(self, toolchain: Toolchain) -> Path:
        """Return the cache directory of the node binaries (a sibling tree of the control plane's)."""
        v = self.node_versions
        key = (
            f"k8s-{v.kubernetes}_containerd-{v.containerd}_cni-{v.cni_plugins}_coredns-{v.coredns}"
            f"_kube-router-{v.kube_router}_lpp-{v.local_path_provisioner}"
            f"_{toolchain.version}_{self.node_inputs_digest()}"
        )
        return self.cache_root.parent / "nodes" / key

    # -- the metrics path (Prometheus, prometheus-adapter) ------------------------------------------

    def metrics_wrapper_dir(self, name: str) -> Path:
        """Return `testbed/go/metrics/<name>`, the wrapper module of one metrics component."""
        return self.repo_root / "testbed" / "go" / "metrics" / name

    @cached_property
    def metrics_versions(self) -> MetricsVersions:
        """Read the metrics components' pinned versions from their wrapper go.mod files."""
        found = {
            component: _pinned_version(self.metrics_wrapper_dir(wrapper) / "go.mod", module)
            for component, (wrapper, module) in _METRICS_PINNED_MODULES.items()
        }
        return MetricsVersions(**found)

    def metrics_cache_dir(self, toolchain: Toolchain) -> Path:
        """Return the cache directory of the metrics binaries (a sibling tree of the control plane's)."""
        digest = hashlib.sha256(METRICS_BUILD_RECIPE_VERSION.encode())
        for name in METRICS_WRAPPER_MODULES:
            for path in sorted(self.metrics_wrapper_dir(name).iterdir()):
                if path.is_file():
                    digest.update(f"{name}/{path.name}\0".encode())
                    digest.update(path.read_bytes())
        v = self.metrics_versions
        key = (
            f"prometheus-{v.prometheus_release}_adapter-{v.prometheus_adapter}"
            f"_{toolchain.version}_{digest.hexdigest()[:12]}"
        )
        return self.cache_root.parent / "metrics" / key

    # -- the LeaderWorkerSet controller ---------------------------------------------------------------

    @property
    def lws_wrapper_dir(self) -> Path:
        """Return `testbed/go/lws`, the wrapper module of the LeaderWorkerSet controller."""
        return self.repo_root / "testbed" / "go" / "lws"

    @cached_property
    def lws_versions(self) -> LwsVersions:
        """Read the LeaderWorkerSet controller's pinned version from its wrapper go.mod."""
        return LwsVersions(lws=_pinned_version(self.lws_wrapper_dir / "go.mod", LWS_MODULE))

    def lws_cache_dir(self, toolchain: Toolchain) -> Path:
        """Return the cache directory of the LeaderWorkerSet build (a sibling tree of the control plane's)."""
        digest = hashlib.sha256(LWS_BUILD_RECIPE_VERSION.encode())
        for path in sorted(self.lws_wrapper_dir.iterdir()):
            if path.is_file():
                digest.update(f"{path.name}\0".encode())
                digest.update(path.read_bytes())
        key = f"lws-{self.lws_versions.lws}_{toolchain.version}_{digest.hexdigest()[:12]}"
        return self.cache_root.parent / "lws" / key
