"""OCI image-layout archives as the test bed writes them for its nodes' containerd."""

from __future__ import annotations

import gzip
import hashlib
import json
import tarfile
from pathlib import Path

from mmd_testbed.localcluster.ocilayout import Entry, ImageConfig, write_image


def test_a_one_layer_image_is_a_valid_oci_layout_that_names_itself(tmp_path: Path) -> None:
    entries = [
        Entry("bin/hello", mode=0o755, data=b"#!/bin/sh\necho hello\n"),
        Entry("tmp", mode=0o1777, directory=True),
    ]
    image_config = ImageConfig(entrypoint=("/bin/hello",), user="1000")
    archive = write_image(tmp_path / "hello.tar", "localhost/mmd-local/hello:1", entries, image_config)
    with tarfile.open(archive) as tar:
        blobs = {
            m.name.rsplit("/", 1)[1]: tar.extractfile(m).read() for m in tar if m.name.startswith("blobs/")
        }  # type: ignore[union-attr]
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        assert json.loads(tar.extractfile("oci-layout").read()) == {"imageLayoutVersion": "1.0.0"}  # type: ignore[union-attr]
    for digest, content in blobs.items():
        assert hashlib.sha256(content).hexdigest() == digest
    (descriptor,) = index["manifests"]
    assert descriptor["annotations"]["io.containerd.image.name"] == "localhost/mmd-local/hello:1"
    manifest = json.loads(blobs[descriptor["digest"].removeprefix("sha256:")])
    config = json.loads(blobs[manifest["config"]["digest"].removeprefix("sha256:")])
    layer = gzip.decompress(blobs[manifest["layers"][0]["digest"].removeprefix("sha256:")])
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert config["config"]["Entrypoint"] == ["/bin/hello"] and config["config"]["User"] == "1000"
    # Deterministic: the same files make the same bytes.
    again = write_image(tmp_path / "again.tar", "localhost/mmd-local/hello:1", entries, image_config)
    assert again.read_bytes() == archive.read_bytes()
