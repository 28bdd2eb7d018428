"""Deterministic names of everything the operator creates, so a restarted operator finds it again.

Pure; imports the config (the default claim's name).
"""

from __future__ import annotations

import hashlib

from mmd_operator.config import DEFAULT_CLAIM

REPOSITORY_DIGEST_LENGTH = 10


def build_job(cache_key: str, claim: str) -> str:
    """The build Job of `cache_key` in `claim`: one per cacheKey and engine-cache claim."""
    if claim == DEFAULT_CLAIM:
        return f"build-{cache_key}"
    return f"build-{cache_key}-{hashlib.sha256(claim.encode()).hexdigest()[:8]}"


def download_job(download_key: str, claim: str) -> str:
    """The weights download Job of `download_key` in `claim`: one per key and engine-cache claim."""
    if claim == DEFAULT_CLAIM:
        return f"download-{download_key}"
    return f"download-{download_key}-{hashlib.sha256(claim.encode()).hexdigest()[:8]}"


def engine_index(claim: str) -> str:
    """The ConfigMap recording the finished engines of `claim`."""
    return f"{claim}-index"


def repository(instance: str, digest: str) -> str:
    """The immutable ConfigMap of one rendered model repository of `instance`."""
    return f"{instance}-repo-{digest[:REPOSITORY_DIGEST_LENGTH]}"


def serving(instance: str) -> str:
    """The Deployment and the Service of `instance`."""
    return instance


def canary(instance: str) -> str:
    """The Deployment of a Canary rollout's new revision of `instance` (one pod, behind its Service)."""
    return f"{instance}-canary"


def group_set(instance: str) -> str:
    """The LeaderWorkerSet of `instance` (a replica across pods).

    Not the Service's name: the LeaderWorkerSet's own headless Service, named like it (its pods' DNS
    subdomain), would clash with it.
    """
    return f"{instance}-group"


def ssh_secret(instance: str) -> str:
    """The Secret of the SSH keys the groups of `instance` run their world with (one replica across pods)."""
    return f"{instance}-ssh"


# The files of that Secret: the leader's key and the line that admits it, the workers' host key and the
# line that trusts it.
SSH_CLIENT_KEY, SSH_AUTHORIZED_KEYS = "id_ed25519", "authorized_keys"
SSH_HOST_KEY, SSH_KNOWN_HOSTS = "ssh_host_ed25519_key", "known_hosts"
SSH_SECRET_FILES = (SSH_CLIENT_KEY, SSH_AUTHORIZED_KEYS, SSH_HOST_KEY, SSH_KNOWN_HOSTS)
