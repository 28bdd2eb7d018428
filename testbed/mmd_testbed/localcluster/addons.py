"""What a cluster with real nodes runs besides its nodes: images of its own add-ons, DNS, volumes, RBAC.

- Images, one layer each, written from the node binaries (`ocilayout`): the pod sandbox (`pause`),
  CoreDNS, the local-path provisioner, and busybox (Debian's static build; the provisioner's helper pods
  and test clients run it).
- CoreDNS as a real cluster runs it: a Deployment in kube-system behind the `kube-dns` Service at the
  address every kubelet hands its pods, answering for `cluster.local` from the API (it forwards nothing:
  there is no resolver beyond the cluster to forward to).
- Rancher's local-path-provisioner as the default StorageClass `local-path`. Every node shares the
  host's file system, so it runs in its shared-file-system mode: a claim becomes a directory under the
  cluster's `volumes/`, made (mode 0777) and removed by helper pods, usable from any node, and
  ReadWriteMany works as on NFS. Like NFS it ignores `fsGroup`.
- RBAC for kube-router, which authenticates as `system:kube-router` with a certificate.

Add-on pods select real nodes only (kwok nodes run nothing).

Imports: the standard library and `network`, `nodebinaries`, `nodes`, `ocilayout`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from mmd_testbed.localcluster.network import ClusterNetwork
from mmd_testbed.localcluster.nodebinaries import NodeBinaries
from mmd_testbed.localcluster.nodes import KUBE_ROUTER_USER, NODE_KIND_LABEL, REAL
from mmd_testbed.localcluster.ocilayout import Entry, ImageConfig, write_image

IMAGE_PREFIX = "localhost/mmd-local"
BUSYBOX = Path(os.environ.get("MMD_BUSYBOX", "/bin/busybox"))
LOCAL_PATH_CLASS = "local-path"
LOCAL_PATH_PROVISIONER = "rancher.io/local-path"
LOCAL_PATH_NAMESPACE = "local-path-storage"
_REAL_NODES = {NODE_KIND_LABEL: REAL}
_PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
_GROUP = b"root:x:0:\nnogroup:x:65534:\n"


def image_names(binaries: NodeBinaries) -> dict[str, str]:
    """The reference of each add-on image."""
    versions = binaries.versions
    return {
        "pause": f"{IMAGE_PREFIX}/pause:{versions.kubernetes}",
        "coredns": f"{IMAGE_PREFIX}/coredns:{versions.coredns}",
        "local-path-provisioner": f"{IMAGE_PREFIX}/local-path-provisioner:{versions.local_path_provisioner}",
        "busybox": f"{IMAGE_PREFIX}/busybox:{busybox_version()}",
    }


def busybox_version() -> str:
    """The version of the host's static busybox (`1.35.0`), the tag of its image."""
    result = subprocess.run([str(BUSYBOX)], capture_output=True, text=True, check=False)
    first = (result.stdout or result.stderr).splitlines()[0] if (result.stdout or result.stderr) else ""
    parts = first.split()
    return parts[1].lstrip("v") if len(parts) > 1 and parts[0] == "BusyBox" else "unknown"


def _base_files() -> list[Entry]:
    return [
        Entry("etc/passwd", data=_PASSWD),
        Entry("etc/group", data=_GROUP),
        Entry("tmp", mode=0o1777, directory=True),
    ]


def binary_image(archive: Path, reference: str, binary: Path, path: str) -> Path:
    """Write (unless it exists) the one-layer image `reference` of one binary; return `archive`.

    The image holds `binary` at `/path` as its entrypoint, a passwd with root and nobody, and /tmp.
    """
    if not archive.is_file():
        entries = [*_base_files(), Entry(path, mode=0o755, source=binary)]
        write_image(archive, reference, entries, ImageConfig(entrypoint=(f"/{path}",)))
    return archive


def write_addon_images(binaries: NodeBinaries, directory: Path) -> dict[str, Path]:
    """Write the add-on images into `directory` (kept when they already exist); return name -> archive."""
    names = image_names(binaries)
    archives: dict[str, Path] = {}

    def single_binary(name: str, path: str) -> None:
        archives[name] = binary_image(directory / f"{name}.tar", names[name], binaries.path(name), path)

    single_binary("pause", "pause")
    single_binary("coredns", "coredns")
    single_binary("local-path-provisioner", "usr/bin/local-path-provisioner")
    archive = directory / f"busybox-{busybox_version()}.tar"
    if not archive.is_file():
        applets = subprocess.run(
            [str(BUSYBOX), "--list"], capture_output=True, text=True, check=True
        ).stdout.split()
        entries = [
            *_base_files(),
            Entry("bin/busybox", mode=0o755, source=BUSYBOX),
            *(Entry(f"bin/{applet}", link="busybox") for applet in applets if applet != "busybox"),
        ]
        write_image(archive, names["busybox"], entries, ImageConfig(cmd=("sh",)))
    archives["busybox"] = archive
    return archives


# -- manifests ------------------------------------------------------------------------------------------


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }


def _binding(name: str, role: str, subject: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [subject],
    }


def _read(*resources: str, group: str = "") -> dict[str, Any]:
    return {"apiGroups": [group], "resources": list(resources), "verbs": ["get", "list", "watch"]}


def kube_router_rbac() -> list[dict[str, Any]]:
    """What kube-router's NetworkPolicy controller reads, bound to its certificate's user."""
    role = _cluster_role(
        "mmd-local:kube-router",
        [
            _read("namespaces", "pods", "services", "nodes", "endpoints"),
            _read("networkpolicies", group="networking.k8s.io"),
            _read("endpointslices", group="discovery.k8s.io"),
        ],
    )
    user = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBE_ROUTER_USER}
    return [role, _binding("mmd-local:kube-router", "mmd-local:kube-router", user)]


def coredns(network: ClusterNetwork, image: str) -> list[dict[str, Any]]:
    """CoreDNS in kube-system and the `kube-dns` Service at the kubelets' cluster DNS address."""
    namespace = "kube-system"
    labels = {"k8s-app": "kube-dns"}
    account = {"kind": "ServiceAccount", "name": "coredns", "namespace": namespace}
    corefile = (
        ".:53 {\n    errors\n    health {\n        lameduck 5s\n    }\n    ready\n"
        "    kubernetes cluster.local in-addr.arpa ip6.arpa {\n        pods insecure\n"
        "        fallthrough in-addr.arpa ip6.arpa\n        ttl 30\n    }\n    cache 30\n    loadbalance\n}\n"
    )
    container = {
        "name": "coredns",
        "image": image,
        "imagePullPolicy": "Never",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": 8080},
            "periodSeconds": 10,
            "failureThreshold": 5,
        },
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "coredns", "namespace": namespace},
        },
        _cluster_role(
            "system:coredns",
            [
                _read("endpoints", "services", "pods", "namespaces"),
                _read("endpointslices", group="discovery.k8s.io"),
            ],
        ),
        _binding("system:coredns", "system:coredns", account),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns", "namespace": namespace},
            "data": {"Corefile": corefile},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "coredns", "namespace": namespace, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "priorityClassName": "system-cluster-critical",
                        "nodeSelector": _REAL_NODES,
                        "dnsPolicy": "Default",
                        "terminationGracePeriodSeconds": 5,
                        "containers": [container],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": namespace, "labels": labels},
            "spec": {
                "selector": labels,
                "clusterIP": network.dns_service_ip,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
    ]


def local_path_provisioner(volumes: Path, image: str, helper_image: str) -> list[dict[str, Any]]:
    """The provisioner in its own namespace, sharing `volumes`, and the default StorageClass."""
    namespace = LOCAL_PATH_NAMESPACE
    account = "local-path-provisioner"
    helper_pod = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: helper-pod\nspec:\n"
        f"  nodeSelector: {{{NODE_KIND_LABEL}: {REAL}}}\n"
        "  terminationGracePeriodSeconds: 1\n"
        "  containers:\n  - name: helper-pod\n"
        f"    image: {helper_image}\n    imagePullPolicy: Never\n"
    )
    config = {
        "config.json": '{"sharedFileSystemPath": "' + str(volumes) + '"}',
        "setup": '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
        "teardown": '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n',
        "helperPod.yaml": helper_pod,
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}},
        _cluster_role(
            "mmd-local:local-path-provisioner",
            [
                _read("nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"),
                {
                    "apiGroups": [""],
                    "resources": ["persistentvolumes"],
                    "verbs": ["get", "list", "watch", "create", "delete", "patch", "update"],
                },
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete"]},
                _read("storageclasses", group="storage.k8s.io"),
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "create", "update"],
                },
            ],
        ),
        _binding(
            "mmd-local:local-path-provisioner",
            "mmd-local:local-path-provisioner",
            {"kind": "ServiceAccount", "name": account, "namespace": namespace},
        ),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "local-path-config", "namespace": namespace},
            "data": config,
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "local-path-provisioner", "namespace": namespace},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "local-path-provisioner"}},
                "template": {
                    "metadata": {"labels": {"app": "local-path-provisioner"}},
                    "spec": {
                        "serviceAccountName": account,
                        "nodeSelector": _REAL_NODES,
                        "terminationGracePeriodSeconds": 2,
                        "containers": [
                            {
                                "name": "provisioner",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "command": [
                                    "local-path-provisioner",
                                    "--debug",
                                    "start",
                                    "--config",
                                    "/etc/config/config.json",
                                    "--service-account-name",
                                    account,
                                    "--provisioner-name",
                                    LOCAL_PATH_PROVISIONER,
                                    "--helper-image",
                                    helper_image,
                                    "--configmap-name",
                                    "local-path-config",
                                ],
                                "env": [
                                    {
                                        "name": "POD_NAMESPACE",
                                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                                    }
                                ],
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/config"}],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": "local-path-config"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": LOCAL_PATH_CLASS,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            "provisioner": LOCAL_PATH_PROVISIONER,
            "reclaimPolicy": "Delete",
            # One file system for every node: a volume can be made before its pod is scheduled.
            "volumeBindingMode": "Immediate",
        },
    ]
