"""Build the CPU stand-ins of the project's images, without a registry or a Docker daemon.

The real-pod tier and `make demo` run the Dockerfile's `operator`, `engine-builder-cpu`, `serving-cpu` and
`trtllm-serve-cpu` targets, built by `buildah bud` (chroot isolation, overlay storage, no daemon) FROM base
images made here, and written as OCI archives that the local cluster imports into each real node's
containerd. The bases are Debian bookworm roots made by mmdebstrap from the Debian mirror, cached by
recipe: `python` (python3 and pip, standing in for python:3.11-slim) and `serving` (the same with
libpython, Open MPI, openssh's client and server and Debian's mpi4py: what a world across pods needs, see
the Dockerfile; both CPU serving stand-ins build on it). Before any build, `wheelhouse/` receives the
wheels of the operator, the builder and the test bed (whose doubles the stand-ins run) and every Python
package the stages install (from PyPI through pip's cache), so no stage reaches a package index. The real
images are the maintainers' (`make images`); both fill the wheelhouse with `image_build`.

Every build prints its steps, seconds and sizes; `images.json` beside the archives records them.
`for_stand_ins` gives a MultimodalDeployment the CPU and memory its stand-in pods need on a real node.

Imports: the standard library, and `image_build`, `layout`, `ocilayout`, `processes`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine_builder.versions import ENGINE_RELEASES, TRTLLM_VERSION
from mmd_testbed.localcluster.image_build import REPOSITORIES, ImageBuildError, Printer, fill_wheelhouse, run
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.processes import exclusive_lock

# What a stand-in pod asks of a real node. The operator derives a GPU server's figures (tens of GiB for
# the engine, the Python models and the checkpoint), which the test bed's nodes cannot hold (two of them
# share this machine, its cores and its memory) and the stand-ins do not need: a CPU tritonserver with the
# model-code doubles, the trtllm-serve double, the builder's and the Hub's doubles. The memory limits stay
# above the pods' memory-backed /dev/shm (serving 2Gi, build 8Gi), as the spec's rules require.
STAND_IN_RESOURCES: dict[str, dict[str, dict[str, str]]] = {
    "build": {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "9Gi"}},
    "serving": {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"memory": "6Gi"}},
}
DEBIAN_SUITE = "bookworm"
DEBIAN_SOURCES = (
    f"deb http://deb.debian.org/debian {DEBIAN_SUITE} main",
    f"deb http://deb.debian.org/debian {DEBIAN_SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {DEBIAN_SUITE}-security main",
)
# What python:3.11-slim has that Debian's essential root lacks: `python`, pip, and libstdc++ (apt's own
# dependency there; manylinux wheels such as google-re2, which cel-python imports, expect it).
_PYTHON = ("python3", "python3-pip", "python-is-python3", "libstdc++6")
# A world across pods (a LeaderWorkerSet group): mpirun, ssh and /usr/sbin/sshd (bash and getent are in the
# essential root), and mpi4py for the doubles' MPI world (Debian's, for Debian's Python).
_WORLD = ("openmpi-bin", "openssh-client", "openssh-server", "python3-mpi4py")
BASE_PACKAGES = {"python": _PYTHON, "serving": (*_PYTHON, "libpython3.11", *_WORLD)}
# 2: uid 1000's login shell is bash (sshd runs a remote command with it), no baked-in ssh host keys.
BASE_RECIPE_VERSION = "2"
LOCAL_TARGETS = ("operator", "engine-builder-cpu", "serving-cpu", "trtllm-serve-cpu")
# The engine path's stand-ins are tagged with their release, as `make images` tags the real ones, so the
# operator names another release's by its tag (mmd_operator.config); each other release gets its own,
# keyed `<target>-<release>` (the `release-cpu` stage of the Dockerfile).
_RELEASE_TAGGED = {target: f"-trtllm{TRTLLM_VERSION}" for target in ("engine-builder-cpu", "serving-cpu")}
_OTHER_RELEASES = tuple(release for release in ENGINE_RELEASES if release != TRTLLM_VERSION)
PYTRITON_VERSION = "0.7.0"
# What the CPU stages install besides our wheels and their dependencies (see the Dockerfile): the serving
# stand-in's numpy and Pillow, the trtllm-serve double's click and soundfile, the builder's huggingface_hub
# (its `download` extra's pin), mpi4py (for a base whose Python is not Debian's: python3-mpi4py serves
# Debian's), and the CPU tritonserver (without its dependencies, which it does not use).
CPU_STAGE_PACKAGES = ("numpy<2", "pillow", "click", "soundfile", "huggingface_hub>=0.23,<1.0", "mpi4py>=4.1")
PYTRITON = f"nvidia-pytriton=={PYTRITON_VERSION}"
LOCAL_REGISTRY = "localhost/mmd-operator"
# The Debian bases made by mmdebstrap; the only images kept in buildah's storage between builds.
BASE_REGISTRY = "localhost/mmd-local"
# Wheel file names of this repository's distributions.
OWN_WHEELS = ("mmd_operator-", "mmd_engine_builder-", "mmd_testbed-")
# The users the images run as, which Debian's essential root lacks, and their shells: the NGC images'
# triton-server (uid 1000; builder and serving pods; bash, for the commands mpirun starts over ssh) and the
# operator's non-root uid.
_USERS = (("triton-server", 1000, "/bin/bash"), ("nonroot", 65532, "/usr/sbin/nologin"))


@dataclass(frozen=True)
class BuiltImage:
    """One built image: its reference and its OCI archive."""

    target: str
    name: str
    archive: Path
    seconds: float

    @property
    def size(self) -> int:
        """Bytes of the archive (compressed layers)."""
        return self.archive.stat().st_size


def images_cache(layout: Layout) -> Path:
    """Where bases, buildah's storage and pip's downloads are cached (beside the control plane)."""
    return layout.cache_root.parent / "images"


# -- bases ------------------------------------------------------------------------------------------------


def _base_digest(name: str) -> str:
    recipe = json.dumps([BASE_RECIPE_VERSION, DEBIAN_SOURCES, BASE_PACKAGES[name], _USERS])
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def _rootfs_to_oci(rootfs_tar: Path, archive: Path, name: str) -> None:
    from mmd_testbed.localcluster.ocilayout import ImageConfig, write_layer_image

    config = ImageConfig(
        env=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"),
        cmd=("python3",),
    )
    write_layer_image(archive, name, rootfs_tar, config)


def ensure_base(layout: Layout, name: str, say: Printer) -> Path:
    """The OCI archive of base `name` (`python` or `serving`), made by mmdebstrap when not cached."""
    cache = images_cache(layout) / "bases"
    archive = cache / f"{name}-{_base_digest(name)}.tar"
    if archive.is_file():
        return archive
    # One lock per base: the two are made at once (`_build_local`), each mostly waiting on the mirror.
    with exclusive_lock(cache / f".{name}.lock"):
        if archive.is_file():
            return archive
        if shutil.which("mmdebstrap") is None:
            raise ImageBuildError(
                "mmdebstrap is missing: `make node-deps` (scripts/install-node-deps.sh) installs it"
            )
        started = time.monotonic()
        packages = ",".join(BASE_PACKAGES[name])
        say(f"--> base image {name}: Debian {DEBIAN_SUITE} + {packages} (mmdebstrap)")
        rootfs = cache / f"{name}.rootfs.tar"
        users = "; ".join(
            f"echo '{user}:x:{uid}:{uid}::/tmp:{shell}' >> \"$1/etc/passwd\"; "
            f"echo '{user}:x:{uid}:' >> \"$1/etc/group\""
            for user, uid, shell in _USERS
        )
        hook = (
            # Like python:3.11-slim: pip installs into the system Python, which Debian otherwise refuses.
            # openssh-server's host keys would be every image's: a worker uses its group's (groups.py).
            'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED "$1"/etc/ssh/ssh_host_*; ' + users
        )
        run(
            [
                "mmdebstrap", "--variant=essential", f"--include={packages}", "--format=tar",
                "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*",
                "--dpkgopt=path-exclude=/usr/share/locale/*", f"--customize-hook={hook}",
                DEBIAN_SUITE, str(rootfs), *DEBIAN_SOURCES,
            ],
            f"mmdebstrap of base {name}",
        )  # fmt: skip
        _rootfs_to_oci(rootfs, archive, f"{BASE_REGISTRY}/base-{name}:{_base_digest(name)}")
        rootfs.unlink()
        for stale in cache.glob(f"{name}-*.tar"):
            if stale != archive:
                stale.unlink()  # a base of an earlier recipe
        say(
            f"    base {name}: {time.monotonic() - started:.0f} s, "
            f"{archive.stat().st_size / 1e6:.0f} MB compressed"
        )
    return archive


# -- wheelhouse -----------------------------------------------------------------------------------------


def for_stand_ins(document: dict[str, Any]) -> dict[str, Any]:
    """`document` (a MultimodalDeployment) with `STAND_IN_RESOURCES` wherever its spec sets no resources."""
    spec = document.setdefault("spec", {})
    for section, resources in STAND_IN_RESOURCES.items():
        pod = spec.setdefault(section, {}).setdefault("pod", {})
        pod.setdefault("resources", {key: dict(values) for key, values in resources.items()})
    return document


def cpu_wheelhouse(layout: Layout, say: Printer) -> Path:
    """The real images' wheelhouse plus the test bed's wheel and what the CPU stages install."""
    wheelhouse = fill_wheelhouse(layout.repo_root, say)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    # The test bed's own wheel alone: the stand-ins install it without its dependencies.
    run([*pip, "wheel", "--no-deps", "--wheel-dir", str(wheelhouse), str(layout.repo_root / "testbed")],
        "pip wheel of the test bed")  # fmt: skip
    download = [*pip, "download", "--dest", str(wheelhouse), "--only-binary=:all:"]
    run([*download, "--no-deps", PYTRITON], "pip download of nvidia-pytriton")
    run([*download, *CPU_STAGE_PACKAGES], "pip download")
    return wheelhouse


# -- builds -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Buildah:
    """buildah with its own storage (overlay, unmounted after each build), chroot isolation, never pulling."""

    root: Path

    def command(self, *args: str) -> list[str]:
        """A buildah argv with this storage."""
        return [
            "buildah", "--root", str(self.root / "storage"), "--runroot", str(self.root / "run"),
            "--storage-driver", "overlay", *args,
        ]  # fmt: skip


def _inputs_digest(layout: Layout, wheelhouse: Path, bases: dict[str, Path]) -> str:
    digest = hashlib.sha256((layout.repo_root / "Dockerfile").read_bytes())
    for path in sorted(wheelhouse.glob("*.whl")):
        digest.update(path.name.encode())
        if path.name.startswith(OWN_WHEELS):
            # Our own wheels change with the source; the others are fixed by their names (versions).
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    for name, base in sorted(bases.items()):
        digest.update(f"{name}={base.name}".encode())
    return digest.hexdigest()[:12]


def build_beside(
    layout: Layout, say: Printer, targets: Sequence[str] = LOCAL_TARGETS
) -> Future[dict[str, BuiltImage]]:
    """Start `build_local` in a thread of its own, its lines marked `[images]`; `.result()` waits for it.

    `make demo` and `make test` build the images while they build the Go binaries: the images mostly wait
    on the Debian mirror, PyPI and the disk, the Go builds keep the cores busy. A daemon thread, so that an
    interrupted run does not wait for it.
    """
    future: Future[dict[str, BuiltImage]] = Future()

    def build() -> None:
        try:
            future.set_result(build_local(layout, lambda line: say(f"[images] {line}"), targets))
        except BaseException as error:  # handed to whoever waits for the result
            future.set_exception(error)

    future.set_running_or_notify_cancel()
    threading.Thread(target=build, name="images", daemon=True).start()
    return future


def build_local(
    layout: Layout, say: Printer, targets: Sequence[str] = LOCAL_TARGETS
) -> dict[str, BuiltImage]:
    """Build the local images (operator and the CPU stand-ins) into `<repo>/.local/images/`."""
    if shutil.which("buildah") is None:
        raise ImageBuildError(
            "buildah is missing: `make node-deps` (scripts/install-node-deps.sh) installs it"
        )
    out = layout.repo_root / ".local" / "images"
    out.mkdir(parents=True, exist_ok=True)
    # The wheelhouse and the archives live in the repository, shared by every caller in it (parallel
    # test workers included): one build at a time, and a second caller then finds the archives.
    with exclusive_lock(out / ".lock"):
        return _build_local(layout, say, targets, out)


def _build_archive(
    buildah: Buildah,
    layout: Layout,
    say: Printer,
    target: str,
    name: str,
    archive: Path,
    arguments: Sequence[str],
) -> None:
    say(f"--> buildah bud --target {target} -> {name}")
    run(
        buildah.command(
            "bud", "--isolation", "chroot", "--pull-never", "--layers=false", "--target", target,
            *(part for argument in arguments for part in ("--build-arg", argument)),
            "-t", name, "-f", str(layout.repo_root / "Dockerfile"), str(layout.repo_root),
        ),
        f"building target {target}",
    )  # fmt: skip
    scratch = archive.with_suffix(".partial")
    scratch.unlink(missing_ok=True)
    run(buildah.command("push", name, f"oci-archive:{scratch}:{name}"), f"writing {name}'s archive")
    scratch.rename(archive)
    run(buildah.command("rmi", "--force", name), f"removing {name} from buildah's storage")


def _keep_only_bases(buildah: Buildah) -> None:
    """Remove every image but the Debian bases from buildah's storage.

    The archives are what the nodes import; what stays in the storage is what builds pulled (a release
    stand-in's base, pulled from the default's archive) or left (an interrupted build's layers), several
    hundred MB per inputs digest that nothing would use again.
    """
    listing = run(buildah.command("images", "--format", "{{.ID}} {{.Name}}"), "listing buildah's images")
    rows = [line.split() for line in listing.splitlines()]
    ours = [row[0] for row in rows if len(row) == 2 and not row[1].startswith(f"{BASE_REGISTRY}/")]
    if ours:
        run(buildah.command("rmi", "--force", *dict.fromkeys(ours)), "removing the built images from buildah")


def _build_local(layout: Layout, say: Printer, targets: Sequence[str], out: Path) -> dict[str, BuiltImage]:
    started = time.monotonic()
    say("==> building the local images from the Dockerfile (buildah, no registry)")
    # The bases and the wheelhouse wait on the Debian mirror, PyPI and the disk more than on a core: all
    # three at once.
    with ThreadPoolExecutor(max_workers=len(BASE_PACKAGES) + 1, thread_name_prefix="image-inputs") as pool:
        made = {name: pool.submit(ensure_base, layout, name, say) for name in BASE_PACKAGES}
        filled = pool.submit(cpu_wheelhouse, layout, say)
        bases = {name: future.result() for name, future in made.items()}
        wheelhouse = filled.result()
    inputs_seconds = time.monotonic() - started
    tag = "local-" + _inputs_digest(layout, wheelhouse, bases)
    buildah = Buildah(images_cache(layout) / "buildah")
    built: dict[str, BuiltImage] = {}
    arguments = (
        f"PYTHON_IMAGE=oci-archive:{bases['python']}",
        f"SERVING_CPU_BASE=oci-archive:{bases['serving']}",
    )

    def ensure(key: str, stage: str, repository: str, image_tag: str, build_arguments: Sequence[str]) -> None:
        name = f"{LOCAL_REGISTRY}/{repository}:{image_tag}"
        archive = out / f"{key}-{tag}.tar"
        step = time.monotonic()
        if not archive.is_file():
            _build_archive(buildah, layout, say, stage, name, archive, build_arguments)
        built[key] = BuiltImage(key, name, archive, time.monotonic() - step)
        say(f"    {key}: {built[key].seconds:.0f} s, {built[key].size / 1e6:.0f} MB ({archive.name})")

    with exclusive_lock(images_cache(layout) / "buildah.lock"):
        for target in targets:
            ensure(target, target, REPOSITORIES[target], tag + _RELEASE_TAGGED.get(target, ""), arguments)
            # Each other engine-path release's stand-in: this one, with the release's version set.
            for release in _OTHER_RELEASES if target in _RELEASE_TAGGED else ():
                base = f"RELEASE_CPU_BASE=oci-archive:{built[target].archive}"
                release_tag = f"{tag}-trtllm{release}"
                ensure(f"{target}-{release}", "release-cpu", REPOSITORIES[target], release_tag,
                       (base, f"TRTLLM_VERSION={release}"))  # fmt: skip
        _keep_only_bases(buildah)
    shutil.rmtree(wheelhouse, ignore_errors=True)
    for stale in out.glob("*.tar"):
        if stale not in {image.archive for image in built.values()}:
            stale.unlink()  # archives of earlier builds: a few hundred MB each
    seconds = {
        "bases and wheels": inputs_seconds,
        **{target: image.seconds for target, image in built.items()},
        "total": time.monotonic() - started,
    }
    record = {
        "seconds": {step: round(value, 1) for step, value in seconds.items()},
        "images": {
            target: {"name": image.name, "archive": str(image.archive), "bytes": image.size}
            for target, image in built.items()
        },
    }
    (out / "images.json").write_text(json.dumps(record, indent=2) + "\n")
    say(f"==> local images ready in {time.monotonic() - started:.0f} s")
    return built
