"""The local cluster's LeaderWorkerSet controller: LWS's own controller manager as a pod on the real nodes.

`python -m mmd_testbed cluster up --lws` installs what upstream's `config/default` kustomization installs,
built from the pinned module's own files (`lwsbinaries` keeps them in its cache) with kustomize's
`namePrefix: lws-` and `namespace: lws-system` applied here:

- the CRDs, every file of the module's `config/crd/bases/` as it is (LeaderWorkerSet and the
  DisaggregatedSet the same manager also reconciles: without its CRD the manager cannot start). Each has
  the one version `v1`, so the conversion webhook upstream's CRD patch adds would never be called; it is
  left out, and with it the need to inject a CA into the CRDs;
- the ServiceAccount `lws-controller-manager`, the ClusterRole `lws-manager-role` (`config/rbac/role.yaml`),
  the leader-election Role, the metrics endpoint's `lws-proxy-role` (TokenReviews, SubjectAccessReviews),
  and their bindings;
- the manager's Configuration (`config/manager/controller_manager_config.yaml`) in the ConfigMap
  `lws-manager-config`, the Deployment `lws-controller-manager` (one replica, on the real nodes, in a
  namespace enforcing Pod Security `restricted` and passing it), the Service `lws-webhook-service`;
- the Mutating/ValidatingWebhookConfigurations of `config/webhook/manifests.yaml` with upstream's two
  patches applied (the pod webhooks see only pods labelled `leaderworkerset.sigs.k8s.io/name`).

**The webhook certificate is issued by the cluster CA (`pki`), not by LWS's internal cert management.**
The Configuration is upstream's with `internalCertManagement.enable: false`. Internal cert management
(open-policy-agent's cert-controller) writes a fresh CA and certificate into the Secret the pod mounts and
then waits for the kubelet to refresh that volume, which takes up to its sync period (about a minute)
after every start; it also rewrites the `caBundle` of the webhook configurations this module applies
server-side. Issued here, the certificate is in the Secret before the pod starts, the webhooks carry the
cluster CA from the first request, and nothing else owns a field of what is applied: the controller is
serving as soon as its pod is Ready, every time. The API server verifies the certificate for
`lws-webhook-service.lws-system.svc` against that CA (no `insecureSkipTLSVerify`), as it does the metrics
adapter's (`monitoring`).

The image is one layer, written from the binary `lwsbinaries` builds; nothing is pulled.

Imports: the standard library, PyYAML, cryptography, the kubernetes client and this package's `addons`,
`lwsbinaries`, `nodes`, `pki`, `realnodes` (server-side apply, waiting for a Deployment).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from mmd_testbed.localcluster import realnodes
from mmd_testbed.localcluster.addons import IMAGE_PREFIX, binary_image
from mmd_testbed.localcluster.lwsbinaries import LWS_BINARY, LwsBinaries
from mmd_testbed.localcluster.nodes import NODE_KIND_LABEL, REAL
from mmd_testbed.localcluster.pki import Credentials, issue_certificate

NAMESPACE = "lws-system"
# Upstream's kustomization prefixes every name with this; cert-controller's names and the Configuration's
# defaults (`lws-webhook-service`, `lws-webhook-server-cert`) assume it.
PREFIX = "lws-"
MANAGER = f"{PREFIX}controller-manager"
WEBHOOK_SERVICE = f"{PREFIX}webhook-service"
WEBHOOK_SECRET = f"{PREFIX}webhook-server-cert"
CONFIG_MAP = f"{PREFIX}manager-config"
WEBHOOK_PORT = 9443
HEALTH_PORT = 8081
GROUP = "leaderworkerset.x-k8s.io"
VERSION = "v1"
PLURAL = "leaderworkersets"
# The label the pod webhooks select on (upstream's webhook patches) and the controller puts on every pod.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
_CONFIG_PATH = "/controller_manager_config.yaml"
# kustomize's commonLabels of upstream's config/default.
_COMMON_LABELS = {"app.kubernetes.io/name": "lws", "app.kubernetes.io/instance": "lws"}
_SELECTOR = {"control-plane": "controller-manager", **_COMMON_LABELS}
_NOBODY = 65534
_RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
_WEBHOOK_PATCHES = {
    "MutatingWebhookConfiguration": "webhook/mutating-patch.yaml",
    "ValidatingWebhookConfiguration": "webhook/validating-patch.yaml",
}
# libyaml when PyYAML has it: the CRDs are 1.3 and 1.5 MB of YAML.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def image_name(binaries: LwsBinaries) -> str:
    """The reference of the controller manager's image."""
    return f"{IMAGE_PREFIX}/lws:{binaries.versions.lws}"


def write_image(binaries: LwsBinaries, directory: Path) -> Path:
    """Write the controller manager's image into `directory` (kept when it exists); return its archive."""
    archive = directory / f"lws-{binaries.versions.lws}.tar"
    # `/manager`, where upstream's image has it and its Deployment runs it.
    return binary_image(archive, image_name(binaries), binaries.path(LWS_BINARY), "manager")


def _documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.load_all(path.read_text(), Loader=_LOADER) if document]


def _labelled(body: dict[str, Any]) -> dict[str, Any]:
    metadata = body.setdefault("metadata", {})
    metadata["labels"] = {**(metadata.get("labels") or {}), **_COMMON_LABELS}
    return body


# -- the module's manifests, as upstream's kustomization renders them -------------------------------------


def crds(binaries: LwsBinaries) -> list[dict[str, Any]]:
    """The module's CRDs as it ships them, with kustomize's common labels."""
    return [_labelled(document) for path in binaries.crds() for document in _documents(path)]


def _json_patch(document: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """`document` with the RFC 6902 `replace` and `add` operations applied (what upstream's patches use)."""
    patched = copy.deepcopy(document)
    for operation in operations:
        *parents, last = [
            part.replace("~1", "/").replace("~0", "~") for part in operation["path"][1:].split("/")
        ]
        target: Any = patched
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if operation["op"] not in ("replace", "add"):
            raise ValueError(f"unsupported patch operation {operation['op']!r}")
        if isinstance(target, list):
            index = len(target) if last == "-" else int(last)
            if operation["op"] == "add":
                target.insert(index, operation["value"])
            else:
                target[index] = operation["value"]
        else:
            target[last] = operation["value"]
    return patched


def webhook_configurations(binaries: LwsBinaries, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The module's webhook configurations, patched, pointed at the webhook Service and `ca_bundle`."""
    configurations = []
    for document in _documents(binaries.config_dir / "webhook" / "manifests.yaml"):
        patch = yaml.safe_load((binaries.config_dir / _WEBHOOK_PATCHES[document["kind"]]).read_text())
        body = _labelled(_json_patch(document, patch))
        body["metadata"]["name"] = PREFIX + body["metadata"]["name"]
        for webhook in body["webhooks"]:
            service = webhook["clientConfig"]["service"]
            service.update({"name": PREFIX + service["name"], "namespace": NAMESPACE})
            webhook["clientConfig"]["caBundle"] = base64.b64encode(ca_bundle).decode()
        configurations.append(body)
    return configurations


def manager_configuration(binaries: LwsBinaries) -> dict[str, Any]:
    """Upstream's Configuration of the manager, its webhook certificate managed here (see above)."""
    configuration: dict[str, Any] = yaml.safe_load(
        (binaries.config_dir / "manager" / "controller_manager_config.yaml").read_text()
    )
    configuration["internalCertManagement"] = {"enable": False}
    return configuration


def _role_ref(kind: str, name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}


def _binding(kind: str, name: str, role_kind: str, role: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if kind == "RoleBinding":
        metadata["namespace"] = NAMESPACE
    return _labelled(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": kind,
            "metadata": metadata,
            "roleRef": _role_ref(role_kind, role),
            "subjects": [{"kind": "ServiceAccount", "name": MANAGER, "namespace": NAMESPACE}],
        }
    )


def rbac(binaries: LwsBinaries) -> list[dict[str, Any]]:
    """The manager's ServiceAccount, its roles as the module ships them, and their bindings."""
    objects: list[dict[str, Any]] = [
        _labelled(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": MANAGER, "namespace": NAMESPACE},
            }
        )
    ]
    for relative, binding in (
        ("rbac/role.yaml", "manager-rolebinding"),
        ("rbac/leader_election_role.yaml", "leader-election-rolebinding"),
        ("rbac/auth_proxy_role.yaml", "proxy-rolebinding"),
    ):
        (role,) = _documents(binaries.config_dir / relative)
        role = _labelled(role)
        role["metadata"]["name"] = PREFIX + role["metadata"]["name"]
        if role["kind"] == "Role":
            role["metadata"]["namespace"] = NAMESPACE
        binding_kind = "RoleBinding" if role["kind"] == "Role" else "ClusterRoleBinding"
        objects += [role, _binding(binding_kind, PREFIX + binding, role["kind"], role["metadata"]["name"])]
    return objects


def _container(image: str) -> dict[str, Any]:
    return {
        "name": "manager",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["/manager"],
        "args": [f"--config={_CONFIG_PATH}", "--zap-log-level=2"],
        "ports": [{"name": "webhook-server", "containerPort": WEBHOOK_PORT, "protocol": "TCP"}],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": HEALTH_PORT},
            "initialDelaySeconds": 15,
            "periodSeconds": 20,
        },
        # Upstream waits 5 s, then every 10 s; here the cluster's start waits on it.
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": HEALTH_PORT}, "periodSeconds": 2},
        # Upstream asks 1 CPU and 1 GiB; a handful of test groups need a fraction of that.
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": _NOBODY,
            "runAsGroup": _NOBODY,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {
                "name": "manager-config",
                "mountPath": _CONFIG_PATH,
                "subPath": "controller_manager_config.yaml",
            },
            {"name": "cert", "mountPath": _CERT_DIR, "readOnly": True},
        ],
    }


def deployment(image: str, configuration: str) -> dict[str, Any]:
    """The controller manager's Deployment: one replica on the real nodes, `restricted` throughout."""
    # The manager reads its Configuration at start only: a changed one rolls its pod.
    digest = hashlib.sha256(configuration.encode()).hexdigest()[:16]
    return _labelled(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": MANAGER,
                "namespace": NAMESPACE,
                "labels": {"control-plane": "controller-manager"},
            },
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": _SELECTOR},
                "template": {
                    "metadata": {
                        "labels": _SELECTOR,
                        "annotations": {
                            "kubectl.kubernetes.io/default-container": "manager",
                            "mmd.local/config-digest": digest,
                        },
                    },
                    "spec": {
                        "serviceAccountName": MANAGER,
                        "nodeSelector": {NODE_KIND_LABEL: REAL},
                        "securityContext": {
                            "runAsNonRoot": True,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "terminationGracePeriodSeconds": 10,
                        "containers": [_container(image)],
                        "volumes": [
                            {"name": "manager-config", "configMap": {"name": CONFIG_MAP}},
                            {"name": "cert", "secret": {"secretName": WEBHOOK_SECRET, "defaultMode": 0o444}},
                        ],
                    },
                },
            },
        }
    )


def webhook_service_name() -> str:
    """The DNS name the API server verifies the webhook's serving certificate against."""
    return f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc"


def serving_certificate(credentials: Credentials) -> tuple[Path, Path]:
    """The webhook's serving certificate and key: the one issued before when the cluster CA signed it.

    Reused, the Secret stays as it is when the objects are applied again.
    """
    cert, key = (
        credentials.directory / f"{WEBHOOK_SERVICE}.crt",
        credentials.directory / f"{WEBHOOK_SERVICE}.key",
    )
    if cert.is_file() and key.is_file():
        authority = x509.load_pem_x509_certificate(credentials.ca_cert.read_bytes())
        try:
            x509.load_pem_x509_certificate(cert.read_bytes()).verify_directly_issued_by(authority)
        except (InvalidSignature, ValueError, TypeError):
            pass
        else:
            return cert, key
    return issue_certificate(
        credentials,
        WEBHOOK_SERVICE,
        common_name=webhook_service_name(),
        dns_names=(f"{WEBHOOK_SERVICE}.{NAMESPACE}", f"{webhook_service_name()}.cluster.local"),
    )


def objects(credentials: Credentials, binaries: LwsBinaries, image: str) -> list[dict[str, Any]]:
    """Everything `up --lws` applies, in order (the CRDs first, the webhook configurations last).

    Issues the webhook's serving certificate from the cluster CA.
    """
    cert, key = serving_certificate(credentials)
    configuration = yaml.safe_dump(manager_configuration(binaries), sort_keys=False)
    return [
        _labelled(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": _RESTRICTED}}
        ),
        *crds(binaries),
        *rbac(binaries),
        _labelled(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE},
                "type": "kubernetes.io/tls",
                "data": {
                    "tls.crt": base64.b64encode(cert.read_bytes()).decode(),
                    "tls.key": base64.b64encode(key.read_bytes()).decode(),
                },
            }
        ),
        _labelled(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
                "data": {"controller_manager_config.yaml": configuration},
            }
        ),
        deployment(image, configuration),
        _labelled(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE},
                "spec": {
                    "selector": _SELECTOR,
                    "ports": [{"port": 443, "protocol": "TCP", "targetPort": WEBHOOK_PORT}],
                },
            }
        ),
        *webhook_configurations(binaries, credentials.ca_cert.read_bytes()),
    ]


# -- readiness ----------------------------------------------------------------------------------------


def wait_established(
    api_client: k8s.ApiClient, names: list[str], timeout: float, sleep: Callable[[float], None]
) -> float:
    """Wait until every CRD of `names` is Established; return the seconds waited."""
    extensions = k8s.ApiextensionsV1Api(api_client)
    started = time.monotonic()
    pending = list(names)
    while time.monotonic() - started < timeout:
        pending = [name for name in pending if not _established(extensions, name)]
        if not pending:
            return time.monotonic() - started
        sleep(0.3)
    raise TimeoutError(f"CRDs not Established after {timeout:.0f} s: {', '.join(pending)}")


def _established(extensions: k8s.ApiextensionsV1Api, name: str) -> bool:
    crd: Any = extensions.read_custom_resource_definition(name)
    conditions = crd.status.conditions or [] if crd.status else []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def probe_group(name: str, image: str) -> dict[str, Any]:
    """A LeaderWorkerSet of two pods of `image` (what the webhooks check is created only as a dry run)."""
    pod = {
        "containers": [{"name": "main", "image": image, "command": ["sleep", "3600"]}],
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": pod}}},
    }


def webhooks_answer(api_client: k8s.ApiClient) -> tuple[bool, str]:
    """Whether a server-side dry-run create of a LeaderWorkerSet passes LWS's webhooks; else why not."""
    custom = k8s.CustomObjectsApi(api_client)
    try:
        created: Any = custom.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, probe_group("webhook-probe", "probe"), dry_run="All"
        )
    except ApiException as error:
        return False, f"{error.status} {error.reason}: {str(error.body or '')[:300]}"
    # The mutating webhook defaults what the API server's own defaulting leaves (e.g. the rollout strategy).
    spec = created.get("spec", {})
    return True, f"defaulted startupPolicy={spec.get('startupPolicy')}"


def wait_webhooks(api_client: k8s.ApiClient, timeout: float, sleep: Callable[[float], None]) -> float:
    """Wait until LWS's webhooks answer the API server; return the seconds waited."""
    started = time.monotonic()
    last = ""
    while time.monotonic() - started < timeout:
        answered, last = webhooks_answer(api_client)
        if answered:
            return time.monotonic() - started
        sleep(0.5)
    raise TimeoutError(
        f"the LeaderWorkerSet webhooks did not answer after {timeout:.0f} s ({last}; "
        f"`kubectl -n {NAMESPACE} logs deploy/{MANAGER}`)"
    )


def start(
    api_client: k8s.ApiClient,
    credentials: Credentials,
    binaries: LwsBinaries,
    timeout: float,
    say: Callable[[str], None],
) -> None:
    """Apply everything `up --lws` installs (its image already on the nodes) and wait until it serves.

    Each wait is bounded by `timeout`: the CRDs Established, the Deployment available, then a server-side
    dry-run create of a LeaderWorkerSet passing the webhooks. Raises TimeoutError or
    `realnodes.NodeStartError` (with the pods' states) naming what is missing.
    """
    started = time.monotonic()
    everything = objects(credentials, binaries, image_name(binaries))
    first = [body for body in everything if body["kind"] in ("Namespace", "CustomResourceDefinition")]
    realnodes.apply(api_client, first)
    names = [body["metadata"]["name"] for body in first if body["kind"] == "CustomResourceDefinition"]
    wait_established(api_client, names, timeout, time.sleep)
    say(f"    CRDs Established after {time.monotonic() - started:.1f} s: {', '.join(names)}")
    realnodes.apply(api_client, [body for body in everything if body not in first])
    realnodes.wait_available(
        k8s.AppsV1Api(api_client), k8s.CoreV1Api(api_client), NAMESPACE, MANAGER, timeout
    )
    say(f"    deployment {NAMESPACE}/{MANAGER} available after {time.monotonic() - started:.1f} s")
    wait_webhooks(api_client, timeout, time.sleep)
    say(
        f"    LWS webhooks answer (a dry-run LeaderWorkerSet passes) after {time.monotonic() - started:.1f} s"
    )
