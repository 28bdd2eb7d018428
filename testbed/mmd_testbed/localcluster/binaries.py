"""Build the control-plane binaries from the Go module proxy, once, into a versioned cache.

Each binary is built with `go build` inside one of the wrapper modules in `testbed/go/controlplane/`
(go.mod/go.sum only), static (CGO_ENABLED=0), with the same tags and version ldflags as the upstream
release builds, so `kubectl version` and helm see a real version. The build goes to a scratch
directory that is renamed into place only when every binary built, under a file lock, so concurrent
callers wait for one build instead of racing. `manifest.json` records the timings and sizes.

Imports: the standard library, `layout`, `processes` (the file lock) and `stages` (kwok files to keep).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from mmd_testbed.localcluster.layout import Layout, Toolchain, Versions, default_cache_root
from mmd_testbed.localcluster.processes import exclusive_lock, lock_if_free, shared_lock
from mmd_testbed.localcluster.stages import UPSTREAM_STAGE_FILES

Printer = Callable[[str], None]

BINARY_NAMES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "helm",
)

# Upstream release builds (hack/lib/golang.sh) use these tags for the Kubernetes binaries.
KUBERNETES_TAGS = ("selinux", "notest", "grpcnotrace")


_HEARTBEAT_SECONDS = 60.0


class BuildError(RuntimeError):
    """A `go` command failed; the message holds its output."""


# Every Go build of the test bed: reproducible paths, and no DWARF from the compiler, since the binaries are
# stripped (`-s -w`) anyway: 13-23 % less compile time on two cores (coredns cold: 64-65 s against 75-83 s).
GO_BUILD_FLAGS = ("-trimpath", "-gcflags=all=-dwarf=false")


@dataclass(frozen=True)
class BinarySpec:
    """How one binary is built: in which wrapper module, which package, with which flags."""

    name: str
    wrapper: str
    package: str
    tags: tuple[str, ...]
    ldflags: tuple[str, ...]
    # The package's test binary (`go test -c`) instead of its command: run later with no Go caches.
    test: bool = False


@dataclass(frozen=True)
class CacheDirectory:
    """A complete, built cache directory: its binaries under `bin/` and what the build recorded."""

    root: Path

    @property
    def bin_dir(self) -> Path:
        """Return the directory holding every binary (put it on PATH for kubectl and helm)."""
        return self.root / "bin"

    def path(self, name: str) -> Path:
        """Return the path of the binary `name`."""
        return self.bin_dir / name

    def manifest(self) -> dict[str, object]:
        """Return what the build recorded (versions, seconds per step, sizes)."""
        loaded: dict[str, object] = json.loads((self.root / "manifest.json").read_text())
        return loaded


@dataclass(frozen=True)
class Binaries(CacheDirectory):
    """The control plane's cache directory."""

    versions: Versions

    @property
    def kwok_stages_dir(self) -> Path:
        """Return the copy of the pinned kwok module's stage files."""
        return self.root / "kwok-stages"


def kubernetes_ldflags(version: str, minor: int, commit: str, build_date: str) -> tuple[str, ...]:
    """Return the ldflags of a Kubernetes binary: stripped, with its version stamped as the release does."""
    flags = ["-s", "-w"]
    # hack/lib/version.sh stamps both packages; kubectl reads client-go's, servers component-base's.
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        values = {
            "gitVersion": version,
            "gitMajor": "1",
            "gitMinor": str(minor),
            "gitCommit": commit,
            "gitTreeState": "clean",
            "buildDate": build_date,
        }
        flags += [f"-X {package}.{key}={value}" for key, value in values.items()]
    return tuple(flags)


def _helm_ldflags(helm_version: str, kubernetes_minor: int) -> tuple[str, ...]:
    # Mirrors helm's Makefile; the k8sVersion values are the default KubeVersion of `helm template`.
    return (
        "-s",
        "-w",
        f"-X helm.sh/helm/v3/internal/version.version={helm_version}",
        "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
        "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1",
        f"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor={kubernetes_minor}",
        "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1",
        f"-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor={kubernetes_minor}",
    )


def binary_specs(versions: Versions, kubernetes_commit: str, kubernetes_date: str) -> list[BinarySpec]:
    """Return the build recipe of every binary, in build order."""
    kube_ldflags = kubernetes_ldflags(
        versions.kubernetes, versions.kubernetes_minor, kubernetes_commit, kubernetes_date
    )
    specs = [BinarySpec("etcd", "kubernetes", "go.etcd.io/etcd/server/v3", KUBERNETES_TAGS, ("-s", "-w"))]
    specs += [
        BinarySpec(name, "kubernetes", f"k8s.io/kubernetes/cmd/{name}", KUBERNETES_TAGS, kube_ldflags)
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
    ]
    specs.append(BinarySpec("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok", (), ("-s", "-w")))
    specs.append(
        BinarySpec(
            "helm",
            "helm",
            "helm.sh/helm/v3/cmd/helm",
            (),
            _helm_ldflags(versions.helm, versions.kubernetes_minor),
        )
    )
    return specs


def go_caches(cache_root: Path | None = None) -> Path:
    """Go's build and module caches of the test bed's builds (`build/`, `mod/`), beside the binary caches.

    Scratch of the builds: the binaries are what is kept, so `drop_go_caches` removes them after
    `builds.ensure_all` (several GB after a cold build), and they are never the machine's own Go caches.
    `cache_root` is a layout's (the default's unless given).
    """
    return (cache_root or default_cache_root()).parent / "go"


def go_environment(caches: Path | None = None) -> dict[str, str]:
    """Return the environment of every `go` call: local toolchain, static, no VCS stamping, our caches.

    `caches` is a `go_caches()` (the default's unless given).
    """
    caches = caches or go_caches()
    env = dict(os.environ)
    env.update(
        {
            "CGO_ENABLED": "0",
            "GOTOOLCHAIN": "local",
            "GOFLAGS": "-mod=readonly -buildvcs=false",
            "GOCACHE": str(caches / "build"),
            "GOMODCACHE": str(caches / "mod"),
        }
    )
    return env


def drop_go_caches(caches: Path, say: Printer) -> None:
    """Remove `caches` (a `go_caches()`) unless a `go` command is using it (then the next call removes it)."""
    if not caches.is_dir() or all(entry.name == ".lock" for entry in caches.iterdir()):
        return
    toolchain = Toolchain.discover()
    with lock_if_free(caches / ".lock") as free:
        if not free:
            say(f"    Go's caches in {caches} are in use by another build; kept")
            return
        size = sum(entry.stat().st_size for entry in caches.rglob("*") if entry.is_file())
        # `go clean` first: the module cache's files and directories are read-only.
        subprocess.run(
            [str(toolchain.go), "clean", "-cache", "-modcache"],
            cwd=caches, env=go_environment(caches), capture_output=True, check=False,
        )  # fmt: skip
        for entry in caches.iterdir():
            if entry.name != ".lock":
                shutil.rmtree(entry, ignore_errors=True)
    say(f"    removed Go's build and module caches ({size / 1e9:.1f} GB in {caches}); the binaries are kept")


def build_jobs() -> int:
    """Return how many packages `go build` compiles at once ($MMD_BUILD_JOBS, default all cores)."""
    return int(os.environ.get("MMD_BUILD_JOBS") or os.cpu_count() or 1)


def run_go(toolchain: Toolchain, args: list[str], cwd: Path, what: str, say: Printer) -> str:
    """Run `go args` in `cwd`, printing a heartbeat while it runs; return its stdout."""
    command = [str(toolchain.go), *args]
    started = time.monotonic()
    finished = threading.Event()

    def heartbeat() -> None:
        while not finished.wait(_HEARTBEAT_SECONDS):
            say(f"    ... still {what} ({time.monotonic() - started:.0f} s)")

    ticker = threading.Thread(target=heartbeat, daemon=True)
    ticker.start()
    try:
        with shared_lock(go_caches() / ".lock"):
            result = subprocess.run(
                command, cwd=cwd, env=go_environment(), capture_output=True, text=True, check=False
            )
    finally:
        finished.set()
        ticker.join()
    if result.returncode != 0:
        raise BuildError(
            f"{what} failed: `{' '.join(command)}` in {cwd} exited {result.returncode}\n"
            f"{result.stdout}{result.stderr}"
        )
    return result.stdout


def go_build_all(
    toolchain: Toolchain,
    specs: list[BinarySpec],
    wrapper_dir: Callable[[str], Path],
    bin_dir: Path,
    say: Printer,
) -> dict[str, float]:
    """`go build` every spec into `bin_dir` (its name may hold a sub-directory); return seconds per name."""
    jobs = build_jobs()
    seconds: dict[str, float] = {}
    for index, spec in enumerate(specs, start=1):
        verb = ["test", "-c"] if spec.test else ["build"]
        say(f"--> [{index}/{len(specs)}] go {' '.join(verb)} {spec.name} ({spec.package})")
        started = time.monotonic()
        output = bin_dir / spec.name
        output.parent.mkdir(parents=True, exist_ok=True)
        args = [*verb, "-p", str(jobs), *GO_BUILD_FLAGS, "-o", str(output)]
        if spec.tags:
            args += ["-tags", ",".join(spec.tags)]
        args += ["-ldflags", " ".join(spec.ldflags), spec.package]
        run_go(toolchain, args, wrapper_dir(spec.wrapper), f"building {spec.name}", say)
        seconds[spec.name] = time.monotonic() - started
        say(f"    {spec.name}: {seconds[spec.name]:.0f} s, {output.stat().st_size / 1e6:.0f} MB")
    return seconds


def _is_complete(root: Path) -> bool:
    return (root / "manifest.json").is_file() and all(
        (root / "bin" / name).is_file() for name in BINARY_NAMES
    )


def build_cache(
    toolchain: Toolchain,
    root: Path,
    specs: list[BinarySpec],
    wrapper_dir: Callable[[str], Path],
    record: Mapping[str, object],
    say: Printer,
) -> dict[str, float]:
    """Build `specs` into `root/bin` through a scratch directory renamed into place; return the seconds.

    The modules of each wrapper are downloaded first (only those the packages need), then every binary is
    built; `manifest.json` holds `record` (versions), the toolchain, the seconds and sizes of each binary.
    The caller holds the cache's lock.
    """
    scratch = root.with_name(f"{root.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "bin").mkdir(parents=True)
    started = time.monotonic()
    for wrapper in dict.fromkeys(spec.wrapper for spec in specs):
        packages = [spec.package for spec in specs if spec.wrapper == wrapper]
        directory = wrapper_dir(wrapper)
        say(f"--> downloading the modules of {directory.name}")
        # `go list -deps` fetches exactly the modules these packages need (not the whole graph).
        listing = ["list", "-deps", "-f", "{{.ImportPath}}", *packages]
        run_go(toolchain, listing, directory, f"downloading modules for {wrapper}", say)
    seconds = {"download": time.monotonic() - started}
    say(f"    modules ready in {seconds['download']:.0f} s")
    seconds.update(go_build_all(toolchain, specs, wrapper_dir, scratch / "bin", say))
    seconds["total"] = time.monotonic() - started
    sizes = {spec.name: (scratch / "bin" / spec.name).stat().st_size for spec in specs}
    manifest = {
        **record,
        "go": toolchain.version,
        "jobs": build_jobs(),
        "cpus": os.cpu_count(),
        "seconds": {name: round(value, 1) for name, value in seconds.items()},
        "bytes": sizes,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (scratch / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    put_in_place(scratch, root)
    return seconds


def put_in_place(scratch: Path, root: Path) -> None:
    """Rename the finished build `scratch` to `root`, and remove the earlier builds of its kind beside it.

    A build of another recipe or version is a sibling named alike up to the first `-` or `_` (`k8s-...`,
    `gitops-check-...`): nothing here uses it again, and each is a few hundred MB. Another checkout at
    another recipe rebuilds its own when it next needs it. So is the scratch of a build whose process
    died (`<name>.partial-<pid>`); a live process's is its own.
    """
    shutil.rmtree(root, ignore_errors=True)
    scratch.rename(root)
    kind = _kind(root.name)
    for sibling in root.parent.iterdir():
        name, _, pid = sibling.name.partition(".partial-")
        earlier = sibling != root and _kind(name) == kind and not (pid and _is_running(pid))
        if earlier and sibling.is_dir():
            shutil.rmtree(sibling, ignore_errors=True)


def _kind(name: str) -> str:
    return re.split(r"[-_]", name, maxsplit=1)[0]


def _is_running(pid: str) -> bool:
    return pid.isdigit() and Path(f"/proc/{pid}").exists()


def module_info(toolchain: Toolchain, wrapper: Path, module: str, say: Printer) -> dict[str, object]:
    """Return what `go mod download -json` says about `module` (its version time, origin commit)."""
    output = run_go(toolchain, ["mod", "download", "-json", module], wrapper, f"looking up {module}", say)
    info: dict[str, object] = json.loads(output)
    return info


def ensure_binaries(layout: Layout, say: Printer = print) -> Binaries:
    """Return the cached binaries of the pinned versions, building them first when missing."""
    toolchain = Toolchain.discover()
    root = layout.cache_dir(toolchain)
    if _is_complete(root):
        return Binaries(root=root, versions=layout.versions)
    on_wait = partial(say, f"==> another build holds {layout.cache_root / '.build.lock'}; waiting for it")
    with exclusive_lock(layout.cache_root / ".build.lock", on_wait):
        if _is_complete(root):  # somebody else built it while we waited
            return Binaries(root=root, versions=layout.versions)
        _build_into(layout, toolchain, root, say)
    return Binaries(root=root, versions=layout.versions)


def _build_into(layout: Layout, toolchain: Toolchain, root: Path, say: Printer) -> None:
    versions = layout.versions
    jobs = build_jobs()
    say(f"==> building the control plane ({versions.describe()}) with {toolchain.version}, -p {jobs}")
    say(f"    cache: {root}")
    scratch = root.with_name(f"{root.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "bin").mkdir(parents=True)
    total_started = time.monotonic()
    seconds: dict[str, float] = {}

    started = time.monotonic()
    kubernetes_wrapper = layout.wrapper_dir("kubernetes")
    info = module_info(toolchain, kubernetes_wrapper, f"k8s.io/kubernetes@{versions.kubernetes}", say)
    origin = info.get("Origin")
    commit = str(origin.get("Hash", "unknown")) if isinstance(origin, dict) else "unknown"
    build_date = str(info.get("Time") or "1970-01-01T00:00:00Z")
    specs = binary_specs(versions, commit, build_date)
    for wrapper in sorted({spec.wrapper for spec in specs}):
        packages = [spec.package for spec in specs if spec.wrapper == wrapper]
        say(f"--> downloading the modules of testbed/go/controlplane/{wrapper}")
        # `go list -deps` fetches exactly the modules these packages need (not the whole graph).
        run_go(
            toolchain, ["list", "-deps", "-f", "{{.ImportPath}}", *packages], layout.wrapper_dir(wrapper),
            f"downloading modules for {wrapper}", say,
        )  # fmt: skip
    seconds["download"] = time.monotonic() - started
    say(f"    modules ready in {seconds['download']:.0f} s")

    seconds.update(go_build_all(toolchain, specs, layout.wrapper_dir, scratch / "bin", say))

    kwok_dir = Path(
        run_go(
            toolchain, ["list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"], layout.wrapper_dir("kwok"),
            "locating the kwok module", say,
        ).strip()
    )  # fmt: skip
    for relative in UPSTREAM_STAGE_FILES:
        target = scratch / "kwok-stages" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kwok_dir / "kustomize" / "stage" / relative, target)

    seconds["total"] = time.monotonic() - total_started
    sizes = {name: (scratch / "bin" / name).stat().st_size for name in BINARY_NAMES}
    manifest = {
        "versions": {
            "kubernetes": versions.kubernetes,
            "etcd": versions.etcd,
            "kwok": versions.kwok,
            "helm": versions.helm,
        },
        "kubernetes_commit": commit,
        "go": toolchain.version,
        "jobs": jobs,
        "cpus": os.cpu_count(),
        "seconds": {name: round(value, 1) for name, value in seconds.items()},
        "bytes": sizes,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (scratch / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    put_in_place(scratch, root)
    say(
        f"==> control plane built in {seconds['total']:.0f} s "
        f"({sum(sizes.values()) / 1e6:.0f} MB of binaries in {root})"
    )
