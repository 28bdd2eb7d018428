"""Digests of manifests: the operator writes an object only when the digest of what it wants changed.

The digest of the manifest as built (before the API server defaults anything) is stored on the object in
an annotation; comparing it with the digest of a newly built manifest is exact, where comparing with the
live object would have to guess which differences the API server made. Pure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from mmd_operator.vocabulary import labels

DIGEST_LENGTH = 16


def digest(value: Any) -> str:
    """A short, stable digest of a JSON-able value."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:DIGEST_LENGTH]


def stamped(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """`manifest` with the digest of its content in the applied-hash annotation."""
    # Copies only along the path it changes: a reconcile stamps every manifest it builds, and a deep
    # copy of each Deployment was a visible share of the operator's CPU time at a thousand resources.
    annotations = dict(manifest.get("metadata", {}).get("annotations") or {})
    annotations.pop(labels.APPLIED_HASH, None)
    stamped_manifest = {**manifest, "metadata": {**manifest.get("metadata", {}), "annotations": annotations}}
    annotations[labels.APPLIED_HASH] = digest(stamped_manifest)
    return stamped_manifest


def applied_hash(manifest: Mapping[str, Any]) -> str | None:
    """The digest a stamped manifest (or a live object) carries."""
    annotations = manifest.get("metadata", {}).get("annotations") or {}
    value = annotations.get(labels.APPLIED_HASH)
    return str(value) if value is not None else None
