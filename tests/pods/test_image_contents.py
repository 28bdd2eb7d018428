"""What the built images hold, read from their OCI archives: the operator image ships only the operator (and
the builder's formats it depends on), and the builder's stand-in has no kopf and no kubernetes client.

The real builder image (FROM the NGC image) cannot be built here; its Dockerfile stage installs
`mmd-engine-builder[gpu]` alone (tests/engine_builder/test_dockerfile.py), and that distribution's
dependencies hold neither (scripts/check-distributions.sh).
"""

from __future__ import annotations

import gzip
import io
import json
import re
import tarfile

import pytest

from mmd_testbed.localcluster import images

pytestmark = pytest.mark.pods

# A Python package or distribution in an image: <prefix>/site-packages/<name>[-<version>.dist-info]/.
_INSTALLED = re.compile(r"(?:^|/)(?:site|dist)-packages/([A-Za-z0-9_]+?)(?:-[^/]*\.dist-info)?/")


def installed(archive: tarfile.TarFile) -> set[str]:
    """Every top-level Python package and distribution (lower case, `-` as `_`) in the image's layers."""
    index = json.loads(archive.extractfile("index.json").read())  # type: ignore[union-attr]
    manifest_digest = index["manifests"][0]["digest"].removeprefix("sha256:")
    manifest = json.loads(archive.extractfile(f"blobs/sha256/{manifest_digest}").read())  # type: ignore[union-attr]
    names: set[str] = set()
    for layer in manifest["layers"]:
        blob = archive.extractfile(f"blobs/sha256/{layer['digest'].removeprefix('sha256:')}").read()  # type: ignore[union-attr]
        data = gzip.decompress(blob) if blob[:2] == b"\x1f\x8b" else blob
        with tarfile.open(fileobj=io.BytesIO(data)) as files:
            for member in files.getnames():
                match = _INSTALLED.search(member)
                if match:
                    names.add(match.group(1).lower().replace("-", "_"))
    return names


def test_the_operator_image_ships_the_operator_alone(built_images: dict[str, images.BuiltImage]) -> None:
    with tarfile.open(built_images["operator"].archive) as archive:
        present = installed(archive)
    # cryptography makes the SSH keys of a replica across pods.
    assert {"mmd_operator", "engine_builder", "kopf", "kubernetes", "cryptography"} <= present
    assert present.isdisjoint({"mmctl", "mmd_testbed", "tools", "tritonclient", "numpy", "psutil"})


def test_the_builder_stand_in_has_no_kopf_no_kubernetes_client_and_no_operator(
    built_images: dict[str, images.BuiltImage],
) -> None:
    with tarfile.open(built_images["engine-builder-cpu"].archive) as archive:
        present = installed(archive)
    # The stand-in runs the test bed's doubles of the GPU tools; the real image has the GPU tools instead.
    assert {"engine_builder", "mmd_testbed", "huggingface_hub"} <= present
    assert present.isdisjoint({"kopf", "kubernetes", "mmd_operator", "mmctl"})
