"""Build and run `testbed/go/gitops`, which judges objects' health the way Flux and Argo CD do.

The Go program there reports, for each object, kstatus's verdict (the cli-utils library Flux uses)
and the verdict of an Argo CD style Lua health check. It is built once per digest of its go.mod,
go.sum and main.go and of the Go version, into the control-plane cache root, with the same `go`
environment as the control-plane binaries; the build goes to a scratch directory renamed into place,
under a file lock, so concurrent callers wait for one build instead of racing.

Imports: the standard library, `layout`, `processes` (the file lock) and `binaries` (`run_go`, the
build flags).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from mmd_testbed.localcluster.binaries import GO_BUILD_FLAGS, Printer, build_jobs, put_in_place, run_go
from mmd_testbed.localcluster.layout import Layout, Toolchain
from mmd_testbed.localcluster.processes import exclusive_lock

BINARY_NAME = "gitops-check"
_SOURCE_FILES = ("go.mod", "go.sum", "main.go")

# Bump when the build command changes in a way the digest of the sources cannot see.
_RECIPE_VERSION = "2"  # 2: GO_BUILD_FLAGS


@dataclass(frozen=True)
class Verdict:
    """What kstatus and the Argo CD health check say about one object."""

    name: str
    kstatus: str
    kstatus_message: str
    argocd: str
    argocd_message: str


def source_dir(layout: Layout) -> Path:
    """Return `testbed/go/gitops/`, the Go module of the checker."""
    return layout.repo_root / "testbed" / "go" / "gitops"


def _digest(sources: Path, toolchain: Toolchain) -> str:
    digest = hashlib.sha256(f"{_RECIPE_VERSION}\0{toolchain.version}\0".encode())
    for name in _SOURCE_FILES:
        digest.update(f"{name}\0".encode())
        digest.update((sources / name).read_bytes())
    return digest.hexdigest()[:12]


def ensure_gitops_check(layout: Layout, say: Printer = print) -> Path:
    """Return the path of the built checker, building it first when the cache has no current build."""
    toolchain = Toolchain.discover()
    sources = source_dir(layout)
    root = layout.cache_root / f"{BINARY_NAME}-{_digest(sources, toolchain)}"
    binary = root / BINARY_NAME
    if binary.is_file():
        return binary
    lock = layout.cache_root / f".{BINARY_NAME}.lock"
    with exclusive_lock(lock, partial(say, f"==> another build holds {lock}; waiting for it")):
        if binary.is_file():  # somebody else built it while we waited
            return binary
        _build_into(toolchain, sources, root, say)
    return binary


def _build_into(toolchain: Toolchain, sources: Path, root: Path, say: Printer) -> None:
    say(f"==> building testbed/go/gitops (kstatus, gopher-lua) with {toolchain.version}")
    say(f"    cache: {root}")
    scratch = root.with_name(f"{root.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    started = time.monotonic()
    output = scratch / BINARY_NAME
    args = ["build", "-p", str(build_jobs()), *GO_BUILD_FLAGS, "-ldflags", "-s -w", "-o", str(output), "."]
    try:
        # The first build downloads the modules from the proxy; go.sum (with -mod=readonly) pins them.
        run_go(toolchain, args, sources, "building testbed/go/gitops", say)
        put_in_place(scratch, root)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    say(f"==> testbed/go/gitops built in {time.monotonic() - started:.0f} s")


def check(
    binary: Path,
    objects: Sequence[Mapping[str, Any]],
    lua_script: Path,
    *,
    open_libs: bool = False,
) -> list[Verdict]:
    """Return the verdicts on `objects` (complete objects, status included), in order.

    `lua_script` is an Argo CD health check (health.lua); `open_libs` is Argo CD's `useOpenLibs`.
    """
    command = [str(binary), "--lua", str(lua_script)]
    if open_libs:
        command.append("--open-libs")
    result = subprocess.run(
        command, input=json.dumps(list(objects)), capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{binary.name} exited {result.returncode} on {len(objects)} object(s) with {lua_script}:\n"
            f"{result.stderr.strip()}"
        )
    return [
        Verdict(
            name=str(entry["name"]),
            kstatus=str(entry["kstatus"]["status"]),
            kstatus_message=str(entry["kstatus"]["message"]),
            argocd=str(entry["argocd"]["status"]),
            argocd_message=str(entry["argocd"]["message"]),
        )
        for entry in json.loads(result.stdout)
    ]
