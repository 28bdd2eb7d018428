"""Write container images as OCI image-layout archives, and load them into a node's containerd.

The local cluster pulls nothing from a registry: every image is built on this machine and imported into
each real node's containerd (`ctr images import`), and pods use it by its `localhost/...` name with
`imagePullPolicy: Never` or a tag that is already present. Small images (the pause sandbox, CoreDNS, the
local-path provisioner, busybox) are a single layer written here from files, deterministically (every
mtime 0), with no tool and no daemon; the project's images come from its Dockerfile through buildah
(`images`).

Imports: the standard library only.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


@dataclass(frozen=True)
class Entry:
    """One file system entry of a layer: a file (from `source` or `data`), a directory or a symlink."""

    path: str
    mode: int = 0o644
    source: Path | None = None
    data: bytes | None = None
    link: str | None = None
    directory: bool = False
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class ImageConfig:
    """The runtime settings recorded in the image config."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    working_dir: str = ""
    labels: dict[str, str] = field(default_factory=dict)


def _layer_tar(entries: Iterable[Entry]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(entries, key=lambda e: e.path):
            info = tarfile.TarInfo(entry.path.lstrip("/"))
            info.mtime = 0
            info.uid, info.gid, info.mode = entry.uid, entry.gid, entry.mode
            content: bytes | None = None
            if entry.directory:
                info.type = tarfile.DIRTYPE
            elif entry.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, entry.link
            else:
                content = entry.data if entry.data is not None else Path(str(entry.source)).read_bytes()
                info.size = len(content)
            tar.addfile(info, io.BytesIO(content) if content is not None else None)
    return buffer.getvalue()


def _blob(tar: tarfile.TarFile, content: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(content).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest.removeprefix('sha256:')}")
    info.size, info.mtime, info.mode = len(content), 0, 0o644
    tar.addfile(info, io.BytesIO(content))
    return digest, len(content)


def write_image(archive: Path, name: str, entries: Iterable[Entry], config: ImageConfig) -> Path:
    """Write a one-layer image called `name` (`localhost/x/y:tag`) to `archive` (an OCI layout tar)."""
    return _write(archive, name, _layer_tar(entries), config)


def write_layer_image(archive: Path, name: str, layer_tar: Path, config: ImageConfig) -> Path:
    """Write a one-layer image whose layer is the file system tar `layer_tar` (a root made by mmdebstrap)."""
    return _write(archive, name, layer_tar.read_bytes(), config)


def _write(archive: Path, name: str, layer: bytes, config: ImageConfig) -> Path:
    compressed = gzip.compress(layer, compresslevel=1, mtime=0)
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": list(config.env),
            **({"Entrypoint": list(config.entrypoint)} if config.entrypoint else {}),
            **({"Cmd": list(config.cmd)} if config.cmd else {}),
            **({"User": config.user} if config.user else {}),
            **({"WorkingDir": config.working_dir} if config.working_dir else {}),
            **({"Labels": dict(config.labels)} if config.labels else {}),
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
        "history": [{"created_by": "mmd_testbed.localcluster.ocilayout"}],
    }
    archive.parent.mkdir(parents=True, exist_ok=True)
    scratch = archive.with_name(archive.name + ".partial")
    with tarfile.open(scratch, "w") as tar:
        config_digest, config_size = _blob(tar, json.dumps(image_config, sort_keys=True).encode())
        layer_digest, layer_size = _blob(tar, compressed)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": config_size},
            "layers": [{"mediaType": LAYER_TYPE, "digest": layer_digest, "size": layer_size}],
        }
        manifest_digest, manifest_size = _blob(tar, json.dumps(manifest, sort_keys=True).encode())
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": MANIFEST_TYPE,
                    "digest": manifest_digest,
                    "size": manifest_size,
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                    },
                }
            ],
        }
        for file_name, document in (("oci-layout", {"imageLayoutVersion": "1.0.0"}), ("index.json", index)):
            data = json.dumps(document).encode()
            info = tarfile.TarInfo(file_name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    os.replace(scratch, archive)
    return archive


class ImageLoadError(RuntimeError):
    """containerd refused an image archive; the message holds what ctr said."""


def import_image(ctr: Path, address: Path, archive: Path) -> None:
    """Load `archive` into the containerd at `address` (the CRI's `k8s.io` namespace), unpacked and pinned."""
    result = subprocess.run(
        [
            str(ctr),
            "--address",
            str(address),
            "-n",
            "k8s.io",
            "images",
            "import",
            # Pinned: the kubelet's image garbage collection never removes what nothing can pull again.
            "--label",
            "io.cri-containerd.pinned=pinned",
            # Containers run from the unpacked snapshots: the compressed layers (about 400 MB a node)
            # would only take disk. ctr discards them only in an import of its own (not the daemon's).
            "--discard-unpacked-layers",
            "--local",
            str(archive),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ImageLoadError(f"ctr images import {archive} into {address} failed: {result.stderr.strip()}")
