"""Build the LeaderWorkerSet controller from the Go module proxy, once, into a cache of its own.

`python -m mmd_testbed cluster up --lws` runs LWS's controller manager as a pod on the real nodes, from a
single-binary image written from this build (`leaderworkerset`). It comes from the Go module
`sigs.k8s.io/lws`, pinned in `testbed/go/lws/go.mod` (go.mod/go.sum only, a `tool` line naming its main
package `sigs.k8s.io/lws/cmd`), static, stamped with its version, commit and date as the upstream Makefile
stamps them. Beside the binary the cache keeps the module's own manifests the cluster is given, as the
pinned version ships them (`config/`: the CRDs, the manager's roles, the webhook configurations, the
manager's Configuration), so nothing of LWS is copied into the repository. The cache sits beside the
control plane's and is keyed by its wrapper module, so a change here rebuilds nothing else.

Imports: the standard library and `binaries`, `layout`, `processes`.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from mmd_testbed.localcluster.binaries import (
    BinarySpec,
    CacheDirectory,
    Printer,
    build_cache,
    build_jobs,
    module_info,
)
from mmd_testbed.localcluster.layout import LWS_MODULE, Layout, LwsVersions, Toolchain
from mmd_testbed.localcluster.processes import exclusive_lock

LWS_BINARY = "lws-manager"
# The module's files the cluster is given, relative to its `config/`, kept under the cache's `config/`.
# The CRDs are every file of `crd/bases/` (found at build time); these are the rest.
LWS_CONFIG_FILES = (
    "rbac/role.yaml",
    "rbac/leader_election_role.yaml",
    "rbac/auth_proxy_role.yaml",
    "webhook/manifests.yaml",
    "webhook/mutating-patch.yaml",
    "webhook/validating-patch.yaml",
    "manager/controller_manager_config.yaml",
)
CRD_DIR = "crd/bases"
_VERSION_PACKAGE = f"{LWS_MODULE}/pkg/version"


@dataclass(frozen=True)
class LwsBinaries(CacheDirectory):
    """The LeaderWorkerSet cache directory: the controller manager and the module's manifests."""

    versions: LwsVersions

    @property
    def config_dir(self) -> Path:
        """Return the copy of the pinned module's `config/` files (`LWS_CONFIG_FILES` and the CRDs)."""
        return self.root / "config"

    def crds(self) -> list[Path]:
        """Return the module's CRD files, in name order."""
        return sorted((self.config_dir / CRD_DIR).glob("*.yaml"))


def lws_binary_specs(versions: LwsVersions, commit: str, build_date: str) -> list[BinarySpec]:
    """Return the build recipe of the controller manager (the upstream Makefile's `-X` stamps)."""
    ldflags = (
        "-s",
        "-w",
        f"-X {_VERSION_PACKAGE}.GitVersion={versions.lws}",
        f"-X {_VERSION_PACKAGE}.GitCommit={commit}",
        f"-X {_VERSION_PACKAGE}.BuildDate={build_date}",
    )
    return [BinarySpec(LWS_BINARY, "lws", f"{LWS_MODULE}/cmd", (), ldflags)]


def _is_complete(root: Path) -> bool:
    config = root / "config"
    return (
        (root / "manifest.json").is_file()
        and (root / "bin" / LWS_BINARY).is_file()
        and all((config / relative).is_file() for relative in LWS_CONFIG_FILES)
        and any((config / CRD_DIR).glob("*.yaml"))
    )


def ensure_lws_binaries(layout: Layout, say: Printer = print) -> LwsBinaries:
    """Return the cached LeaderWorkerSet build of the pinned version, building it first when missing."""
    toolchain = Toolchain.discover()
    root = layout.lws_cache_dir(toolchain)
    if not _is_complete(root):
        lock = root.parent / ".build.lock"
        with exclusive_lock(lock, partial(say, f"==> another build holds {lock}; waiting for it")):
            if not _is_complete(root):
                _build_into(layout, toolchain, root, say)
    return LwsBinaries(root=root, versions=layout.lws_versions)


def copy_config(module_dir: Path, target: Path) -> None:
    """Copy the module's `config/` files the cluster is given into `target` (writable copies)."""
    source = module_dir / "config"
    relatives = [
        *LWS_CONFIG_FILES,
        *(f"{CRD_DIR}/{p.name}" for p in sorted((source / CRD_DIR).glob("*.yaml"))),
    ]
    for relative in relatives:
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        # copyfile, not copy: the module cache's files are read-only, the cache's copies need not be.
        shutil.copyfile(source / relative, destination)


def release_time(info: dict[str, object]) -> str:
    """Return the module version's time as the proxy's `.info` file records it.

    `go mod download -json` names that file but does not repeat the time.
    """
    try:
        recorded = json.loads(Path(str(info["Info"])).read_text())
    except (KeyError, OSError, ValueError):
        return "1970-01-01T00:00:00Z"
    return str(recorded.get("Time") or "1970-01-01T00:00:00Z")


def _build_into(layout: Layout, toolchain: Toolchain, root: Path, say: Printer) -> None:
    versions = layout.lws_versions
    say(f"==> building {versions.describe()} with {toolchain.version}, -p {build_jobs()}")
    say(f"    cache: {root}")
    info = module_info(toolchain, layout.lws_wrapper_dir, f"{LWS_MODULE}@{versions.lws}", say)
    origin = info.get("Origin")
    commit = str(origin.get("Hash", "unknown")) if isinstance(origin, dict) else "unknown"
    build_date = release_time(info)
    record = {"versions": {"lws": versions.lws}, "lws_commit": commit}
    specs = lws_binary_specs(versions, commit, build_date)
    seconds = build_cache(toolchain, root, specs, lambda _wrapper: layout.lws_wrapper_dir, record, say)
    # The manifests go in after the binary; a cache missing any of them is incomplete and rebuilt.
    scratch = root / "config.partial"
    shutil.rmtree(scratch, ignore_errors=True)
    copy_config(Path(str(info["Dir"])), scratch)
    scratch.rename(root / "config")
    size = (root / "bin" / LWS_BINARY).stat().st_size
    say(f"==> {versions.describe()} built in {seconds['total']:.0f} s ({size / 1e6:.0f} MB in {root})")
