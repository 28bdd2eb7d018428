"""The namespace `mmctl validate --cluster` checks when a document names none: the kubeconfig context's."""

from __future__ import annotations

from pathlib import Path

import yaml

from mmd_operator.kube.client import KubeClient


def test_the_namespace_is_the_contexts_and_default_without_one(tmp_path: Path) -> None:
    cluster = {"name": "local", "cluster": {"server": "https://127.0.0.1:6443"}}
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "ml", "context": {"cluster": "local", "user": "me", "namespace": "ml"}},
                    {"name": "plain", "context": {"cluster": "local", "user": "me"}},
                ],
                "current-context": "ml",
            }
        )
    )
    assert KubeClient.kubeconfig_namespace(str(kubeconfig)) == "ml"
    assert KubeClient.kubeconfig_namespace(str(kubeconfig), context="plain") == "default"
