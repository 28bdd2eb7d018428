"""Build what a real node runs, from the Go module proxy, once, into a cache beside the control plane's.

A real node of the local cluster is a kubelet and kube-proxy (the pinned k8s.io/kubernetes, built in the
control plane's wrapper module), containerd v2 with its runc shim and `ctr`, the CNI plugins it calls
(bridge, host-local, portmap, loopback), kube-router's NetworkPolicy controller, and, as cluster add-ons
run in pods, CoreDNS (with the plugins a cluster DNS uses) and Rancher's local-path-provisioner. The pod
sandbox image's `pause` is a few lines of Go in `testbed/go/nodes/pause`. The OCI runtime, runc, is Debian's
(it needs cgo and libseccomp); `scripts/install-node-deps.sh` installs it with iptables, ipset, buildah
and mmdebstrap.

Like the control plane: static builds, a scratch directory renamed into place under a file lock, and
`manifest.json` with the seconds and bytes of each binary.

Imports: the standard library and `binaries`, `layout`, `processes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from mmd_testbed.localcluster.binaries import (
    KUBERNETES_TAGS,
    BinarySpec,
    CacheDirectory,
    Printer,
    build_cache,
    build_jobs,
    kubernetes_ldflags,
    module_info,
)
from mmd_testbed.localcluster.layout import Layout, NodeVersions, Toolchain
from mmd_testbed.localcluster.processes import exclusive_lock

CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
NODE_BINARY_NAMES = (
    "kubelet",
    "kube-proxy",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    *(f"cni/{plugin}" for plugin in CNI_PLUGINS),
    "kube-router",
    "coredns",
    "local-path-provisioner",
    "pause",
)
# containerd's release builds leave out the snapshotters that need cgo or kernel features we never use.
_CONTAINERD_TAGS = ("no_btrfs", "no_devmapper", "no_zfs", "no_aufs")
_CONTAINERD = "github.com/containerd/containerd/v2"
_CNI = "github.com/containernetworking/plugins"
_CNI_PACKAGES = {
    "bridge": "plugins/main/bridge",
    "host-local": "plugins/ipam/host-local",
    "loopback": "plugins/main/loopback",
    "portmap": "plugins/meta/portmap",
}


@dataclass(frozen=True)
class NodeBinaries(CacheDirectory):
    """The real nodes' cache directory."""

    versions: NodeVersions

    @property
    def cni_dir(self) -> Path:
        """Return the directory of the CNI plugins (containerd's `bin_dirs`)."""
        return self.bin_dir / "cni"


def node_binary_specs(
    versions: NodeVersions, kubernetes_commit: str, kubernetes_date: str
) -> list[BinarySpec]:
    """Return the build recipe of every node binary, in build order."""
    minor = int(versions.kubernetes.lstrip("v").split(".")[1])
    kube_ldflags = kubernetes_ldflags(versions.kubernetes, minor, kubernetes_commit, kubernetes_date)
    specs: list[BinarySpec] = []
    containerd_ldflags = (
        "-s",
        "-w",
        f"-X github.com/containerd/containerd/v2/version.Version={versions.containerd}",
    )
    specs += [
        BinarySpec(name, "containerd", f"{_CONTAINERD}/cmd/{name}", _CONTAINERD_TAGS, containerd_ldflags)
        for name in ("containerd", "containerd-shim-runc-v2", "ctr")
    ]
    specs += [
        BinarySpec(f"cni/{plugin}", "containerd", f"{_CNI}/{package}", (), ("-s", "-w"))
        for plugin, package in _CNI_PACKAGES.items()
    ]
    specs.append(
        BinarySpec(
            "kube-router",
            "kube-router",
            "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router",
            (),
            (
                "-s",
                "-w",
                f"-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version={versions.kube_router}",
            ),
        )
    )
    specs.append(BinarySpec("coredns", "coredns", "mmd-operator/testbed/go/nodes/coredns", (), ("-s", "-w")))
    specs.append(
        BinarySpec(
            "local-path-provisioner",
            "local-path-provisioner",
            "github.com/rancher/local-path-provisioner",
            (),
            ("-s", "-w", f"-X main.VERSION={versions.local_path_provisioner}"),
        )
    )
    specs.append(BinarySpec("pause", "pause", "mmd-operator/testbed/go/nodes/pause", (), ("-s", "-w")))
    # Last: built beside the control plane (`builds`), the kubelet and kube-proxy then find the Kubernetes
    # packages they share with it compiled in Go's build cache.
    specs += [
        BinarySpec(name, "kubernetes", f"k8s.io/kubernetes/cmd/{name}", KUBERNETES_TAGS, kube_ldflags)
        for name in ("kubelet", "kube-proxy")
    ]
    return specs


def _is_complete(root: Path) -> bool:
    return (root / "manifest.json").is_file() and all(
        (root / "bin" / name).is_file() for name in NODE_BINARY_NAMES
    )


def ensure_node_binaries(layout: Layout, say: Printer = print) -> NodeBinaries:
    """Return the cached node binaries of the pinned versions, building them first when missing."""
    toolchain = Toolchain.discover()
    root = layout.node_cache_dir(toolchain)
    if _is_complete(root):
        return NodeBinaries(root=root, versions=layout.node_versions)
    lock = root.parent / ".build.lock"
    with exclusive_lock(lock, partial(say, f"==> another build holds {lock}; waiting for it")):
        if not _is_complete(root):
            _build_into(layout, toolchain, root, say)
    return NodeBinaries(root=root, versions=layout.node_versions)


def _build_into(layout: Layout, toolchain: Toolchain, root: Path, say: Printer) -> None:
    versions = layout.node_versions
    say(
        f"==> building the node components ({versions.describe()}) "
        f"with {toolchain.version}, -p {build_jobs()}"
    )
    say(f"    cache: {root}")
    info = module_info(
        toolchain, layout.node_wrapper_dir("kubernetes"), f"k8s.io/kubernetes@{versions.kubernetes}", say
    )
    origin = info.get("Origin")
    commit = str(origin.get("Hash", "unknown")) if isinstance(origin, dict) else "unknown"
    specs = node_binary_specs(versions, commit, str(info.get("Time") or "1970-01-01T00:00:00Z"))
    record = {
        "versions": {name: getattr(versions, name) for name in versions.__dataclass_fields__},
        "kubernetes_commit": commit,
    }
    seconds = build_cache(toolchain, root, specs, layout.node_wrapper_dir, record, say)
    size = sum(path.stat().st_size for path in (root / "bin").rglob("*") if path.is_file())
    say(f"==> node components built in {seconds['total']:.0f} s ({size / 1e6:.0f} MB of binaries in {root})")
