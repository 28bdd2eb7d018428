"""The SSH keys of a replica across pods: an Ed25519 client key and host key, in OpenSSH's formats.

The Secret (`names.SSH_SECRET_FILES`) holds the client's private key and its `authorized_keys` line,
the workers' host key and a `known_hosts` line that trusts that host key on every name, so the leader
checks whom it connects to. Made once per resource by the writer, which never logs, events or caches
them. Imports `cryptography` and the vocabulary.
"""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mmd_operator.vocabulary import names


def _pair(comment: str) -> tuple[bytes, bytes]:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return private, public + b" " + comment.encode()


def secret_data(instance: str) -> dict[str, str]:
    """A new key set for the groups of `instance`, as a Secret's base64 `data`."""
    client_private, client_public = _pair(f"mmd-operator {instance} leader")
    host_private, host_public = _pair(f"mmd-operator {instance} workers")
    files = {
        names.SSH_CLIENT_KEY: client_private,
        names.SSH_AUTHORIZED_KEYS: client_public + b"\n",
        names.SSH_HOST_KEY: host_private,
        names.SSH_KNOWN_HOSTS: b"* " + host_public + b"\n",
    }
    return {name: base64.b64encode(content).decode() for name, content in files.items()}
