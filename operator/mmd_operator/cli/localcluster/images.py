"""Build the project's images from its Dockerfile without a registry or a Docker daemon, or for one.

Local images (`mmctl images build --local`, the real-pod tier, `make demo`): the Dockerfile's `operator`,
`engine-builder-cpu`, `serving-cpu` and `trtllm-serve-cpu` targets, built by `buildah bud` (chroot
isolation, overlay storage, no daemon) FROM base images made here, and written as OCI archives that the
local cluster imports into each real node's containerd. The bases are Debian bookworm roots made by
mmdebstrap from the Debian mirror, cached by recipe: `python` (python3 and pip, standing in for
python:3.11-slim) and `serving` (the same with libpython and Open MPI). Before any build, `wheelhouse/`
receives this repository's wheel and every Python package the stages install (from PyPI through pip's
cache), so no stage reaches a package index.

Registry images (`mmctl images build --registry R [--push]`): the `operator`, `engine-builder` and
`serving` targets FROM the NGC Triton image and `trtllm-serve` FROM TensorRT-LLM's release image, with
docker buildx (or buildah), tagged for R; the command prints the chart values that point at them.

Every build prints its steps, seconds and sizes; `images.json` beside the archives records them.

Imports: the standard library and `layout`, `ocilayout`, `processes`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine_builder.versions import SERVE_TRTLLM_VERSION, TRTLLM_VERSION
from mmd_operator.cli.localcluster.layout import Layout
from mmd_operator.cli.localcluster.processes import exclusive_lock

Printer = Callable[[str], None]

DEBIAN_SUITE = "bookworm"
DEBIAN_SOURCES = (
    f"deb http://deb.debian.org/debian {DEBIAN_SUITE} main",
    f"deb http://deb.debian.org/debian {DEBIAN_SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {DEBIAN_SUITE}-security main",
)
# What python:3.11-slim has that Debian's essential root lacks: `python`, pip, and libstdc++ (apt's own
# dependency there; manylinux wheels such as google-re2, which cel-python imports, expect it).
_PYTHON = ("python3", "python3-pip", "python-is-python3", "libstdc++6")
BASE_PACKAGES = {"python": _PYTHON, "serving": (*_PYTHON, "libpython3.11", "openmpi-bin")}
BASE_RECIPE_VERSION = "1"
LOCAL_TARGETS = ("operator", "engine-builder-cpu", "serving-cpu", "trtllm-serve-cpu")
REGISTRY_TARGETS = ("operator", "engine-builder", "serving", "trtllm-serve")
# Repository names under a registry (and under localhost/mmd-operator for local images).
REPOSITORIES = {
    "operator": "operator",
    "engine-builder": "engine-builder",
    "serving": "serving",
    "trtllm-serve": "trtllm-serve",
    "engine-builder-cpu": "engine-builder",
    "serving-cpu": "serving",
    "trtllm-serve-cpu": "trtllm-serve",
}
# The chart value of each image (the operator's image is `image.repository` and `image.tag`).
CHART_IMAGE_VALUES = {
    "engine-builder": "images.engineBuilder",
    "serving": "images.serving",
    "trtllm-serve": "images.trtllmServe",
}
PYTRITON_VERSION = "0.7.0"
# What the CPU stages install besides our wheel and its dependencies (see the Dockerfile): the serving
# stand-in's numpy and Pillow, the trtllm-serve double's click and soundfile, the builder's huggingface_hub
# (the `builder` extra's pin), and the CPU tritonserver (without its dependencies, which it does not use).
CPU_STAGE_PACKAGES = ("numpy<2", "pillow", "click", "soundfile", "huggingface_hub>=0.23,<1.0")
PYTRITON = f"nvidia-pytriton=={PYTRITON_VERSION}"
LOCAL_REGISTRY = "localhost/mmd-operator"
# The users the images run as, which Debian's essential root lacks: the NGC images' triton-server (uid
# 1000; builder and serving pods) and the operator's non-root uid.
_USERS = (("triton-server", 1000), ("nonroot", 65532))


class ImageBuildError(RuntimeError):
    """A build step failed; the message names the step and what its tool said."""


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


def _run(
    command: Sequence[str], what: str, *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> str:
    result = subprocess.run(list(command), capture_output=True, text=True, env=env, cwd=cwd, check=False)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip().splitlines()
        raise ImageBuildError(
            f"{what} failed (exit {result.returncode}): {' '.join(command[:4])} ...\n"
            + "\n".join(output[-25:])
        )
    return result.stdout


def images_cache(layout: Layout) -> Path:
    """Where bases, buildah's storage and pip's downloads are cached (beside the control plane)."""
    return layout.cache_root.parent / "images"


# -- bases ------------------------------------------------------------------------------------------------


def _base_digest(name: str) -> str:
    recipe = json.dumps([BASE_RECIPE_VERSION, DEBIAN_SOURCES, BASE_PACKAGES[name], _USERS])
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def _rootfs_to_oci(rootfs_tar: Path, archive: Path, name: str) -> None:
    from mmd_operator.cli.localcluster.ocilayout import ImageConfig, write_layer_image

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
    with exclusive_lock(cache / ".lock"):
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
            f"echo '{user}:x:{uid}:{uid}::/tmp:/usr/sbin/nologin' >> \"$1/etc/passwd\"; "
            f"echo '{user}:x:{uid}:' >> \"$1/etc/group\""
            for user, uid in _USERS
        )
        hook = (
            # Like python:3.11-slim: pip installs into the system Python, which Debian otherwise refuses.
            'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED; ' + users
        )
        _run(
            [
                "mmdebstrap", "--variant=essential", f"--include={packages}", "--format=tar",
                "--dpkgopt=path-exclude=/usr/share/man/*", "--dpkgopt=path-exclude=/usr/share/doc/*",
                "--dpkgopt=path-exclude=/usr/share/locale/*", f"--customize-hook={hook}",
                DEBIAN_SUITE, str(rootfs), *DEBIAN_SOURCES,
            ],
            f"mmdebstrap of base {name}",
        )  # fmt: skip
        _rootfs_to_oci(rootfs, archive, f"localhost/mmd-local/base-{name}:{_base_digest(name)}")
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


def fill_wheelhouse(layout: Layout, *, cpu: bool, say: Printer) -> Path:
    """Put this repository's wheel and every package the stages install into `<repo>/wheelhouse/`."""
    wheelhouse = layout.repo_root / "wheelhouse"
    shutil.rmtree(wheelhouse, ignore_errors=True)
    wheelhouse.mkdir()
    started = time.monotonic()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    # The project's wheel and its dependencies, built or downloaded as wheels (pip's cache makes it quick).
    _run([*pip, "wheel", "--wheel-dir", str(wheelhouse), str(layout.repo_root)], "pip wheel of the project")
    if cpu:
        _run(
            [
                *pip,
                "download",
                "--dest",
                str(wheelhouse),
                "--only-binary=:all:",
                "--no-deps",
                PYTRITON,
            ],
            "pip download of nvidia-pytriton",
        )
        _run(
            [*pip, "download", "--dest", str(wheelhouse), "--only-binary=:all:", *CPU_STAGE_PACKAGES],
            "pip download",
        )
    wheels = sorted(wheelhouse.glob("*.whl"))
    size = sum(wheel.stat().st_size for wheel in wheels)
    say(f"    wheelhouse: {len(wheels)} wheels, {size / 1e6:.0f} MB in {time.monotonic() - started:.0f} s")
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
        if path.name.startswith("mmd_operator-"):
            # Our own wheel changes with the source; the others are fixed by their names (versions).
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    for path in sorted((layout.repo_root / "tests" / "engine_builder" / "doubles").glob("*.py")):
        digest.update(path.read_bytes())
    for name, base in sorted(bases.items()):
        digest.update(f"{name}={base.name}".encode())
    return digest.hexdigest()[:12]


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


def _build_local(layout: Layout, say: Printer, targets: Sequence[str], out: Path) -> dict[str, BuiltImage]:
    started = time.monotonic()
    say("==> building the local images from the Dockerfile (buildah, no registry)")
    bases = {name: ensure_base(layout, name, say) for name in BASE_PACKAGES}
    wheelhouse = fill_wheelhouse(layout, cpu=True, say=say)
    tag = "local-" + _inputs_digest(layout, wheelhouse, bases)
    buildah = Buildah(images_cache(layout) / "buildah")
    built: dict[str, BuiltImage] = {}
    with exclusive_lock(images_cache(layout) / "buildah.lock"):
        for target in targets:
            name = f"{LOCAL_REGISTRY}/{REPOSITORIES[target]}:{tag}"
            archive = out / f"{target}-{tag}.tar"
            step = time.monotonic()
            if not archive.is_file():
                say(f"--> buildah bud --target {target} -> {name}")
                _run(
                    buildah.command(
                        "bud", "--isolation", "chroot", "--pull-never", "--layers=false", "--target", target,
                        "--build-arg", f"PYTHON_IMAGE=oci-archive:{bases['python']}",
                        "--build-arg", f"SERVING_CPU_BASE=oci-archive:{bases['serving']}",
                        "-t", name, "-f", str(layout.repo_root / "Dockerfile"), str(layout.repo_root),
                    ),
                    f"building target {target}",
                )  # fmt: skip
                scratch = archive.with_suffix(".partial")
                scratch.unlink(missing_ok=True)
                _run(
                    buildah.command("push", name, f"oci-archive:{scratch}:{name}"),
                    f"writing {target}'s archive",
                )
                scratch.rename(archive)
                _run(buildah.command("rmi", "--force", name), f"removing {target} from buildah's storage")
            built[target] = BuiltImage(target, name, archive, time.monotonic() - step)
            say(
                f"    {target}: {built[target].seconds:.0f} s, "
                f"{built[target].size / 1e6:.0f} MB ({archive.name})"
            )
    shutil.rmtree(wheelhouse, ignore_errors=True)
    for stale in out.glob("*.tar"):
        if stale not in {image.archive for image in built.values()}:
            stale.unlink()  # archives of earlier builds: a few hundred MB each
    record = {
        target: {
            "name": image.name,
            "archive": str(image.archive),
            "seconds": round(image.seconds, 1),
            "bytes": image.size,
        }
        for target, image in built.items()
    }
    (out / "images.json").write_text(json.dumps(record, indent=2) + "\n")
    say(f"==> local images ready in {time.monotonic() - started:.0f} s")
    return built


def registry_images(registry: str, version: str) -> dict[str, str]:
    """The real images' references under `registry` (target -> name:tag), tagged as the chart's defaults."""
    gpu_tag = f"{version}-trtllm{TRTLLM_VERSION}"
    serve_tag = f"{version}-trtllm{SERVE_TRTLLM_VERSION}"
    tags = {"operator": version, "engine-builder": gpu_tag, "serving": gpu_tag, "trtllm-serve": serve_tag}
    return {
        target: f"{registry.rstrip('/')}/{REPOSITORIES[target]}:{tags[target]}" for target in REGISTRY_TARGETS
    }


def registry_commands(
    layout: Layout, references: dict[str, str], *, tool: str, push: bool
) -> list[list[str]]:
    """The commands that build (and push) the real images (run after `fill_wheelhouse(cpu=False)`)."""
    context = str(layout.repo_root)
    commands = []
    for target, name in references.items():
        if tool == "docker":
            commands.append(
                [
                    "docker",
                    "buildx",
                    "build",
                    "--target",
                    target,
                    "-t",
                    name,
                    "--push" if push else "--load",
                    context,
                ]
            )
        else:
            commands.append(["buildah", "bud", "--target", target, "-t", name, context])
            if push:
                commands.append(["buildah", "push", name])
    return commands


def chart_values(images: dict[str, str], hf_endpoint: str | None = None) -> list[str]:
    """The `helm install --set` arguments that point the chart at `images` (target -> reference).

    A CPU stand-in counts as the image it stands in for. `hf_endpoint` is the Hub the weights downloads
    talk to (the local cluster's Hub double for the local images), when given.
    """
    repository, _, tag = images["operator"].rpartition(":")
    values = [f"image.repository={repository}", f"image.tag={tag}"]
    for target, reference in images.items():
        value = CHART_IMAGE_VALUES.get(target.removesuffix("-cpu"))
        if value is not None:
            values.append(f"{value}={reference}")
    if hf_endpoint is not None:
        values.append(f"hfEndpoint={hf_endpoint}")
    return values


def chart_values_document(images: dict[str, str], hf_endpoint: str | None = None) -> dict[str, Any]:
    """The same values as `chart_values`, as the nested mapping of a Helm values file."""
    document: dict[str, Any] = {}
    for assignment in chart_values(images, hf_endpoint):
        path, _, value = assignment.partition("=")
        *parents, leaf = path.split(".")
        node = document
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return document
