"""The local cluster's LeaderWorkerSet controller without a cluster: the objects made from the module's own
files (a small module of the same shape stands in for `sigs.k8s.io/lws`), the webhook certificate, the
pinned version and the cache key."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509

from mmd_testbed.localcluster import leaderworkerset
from mmd_testbed.localcluster.layout import Layout, LwsVersions, Toolchain
from mmd_testbed.localcluster.lwsbinaries import (
    LWS_BINARY,
    LWS_CONFIG_FILES,
    LwsBinaries,
    copy_config,
    lws_binary_specs,
    release_time,
)
from mmd_testbed.localcluster.nodes import NODE_KIND_LABEL, REAL
from mmd_testbed.localcluster.pki import generate_credentials

_WEBHOOK = {
    "admissionReviewVersions": ["v1"],
    "sideEffects": "None",
    "failurePolicy": "Fail",
}


def _webhook(name: str, path: str, group: str, resource: str) -> dict[str, Any]:
    service = {"name": "webhook-service", "namespace": "system", "path": path}
    rules = [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [resource]}]
    return {**_WEBHOOK, "name": name, "clientConfig": {"service": service}, "rules": rules}


def _pod_patch(name: str, path: str) -> list[dict[str, Any]]:
    webhook = _webhook(name, path, "", "pods")
    webhook["objectSelector"] = {
        "matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]
    }
    return [{"op": "replace", "path": "/webhooks/1", "value": webhook}]


def _role(kind: str, name: str) -> dict[str, Any]:
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "rules": [rule],
    }


def _module(root: Path) -> Path:
    """A module directory with the files `lwsbinaries` copies, shaped as sigs.k8s.io/lws ships them."""
    config = root / "config"
    files: dict[str, Any] = {
        "rbac/role.yaml": [_role("ClusterRole", "manager-role")],
        "rbac/leader_election_role.yaml": [_role("Role", "leader-election-role")],
        "rbac/auth_proxy_role.yaml": [_role("ClusterRole", "proxy-role")],
        "webhook/manifests.yaml": [
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "mutating-webhook-configuration"},
                "webhooks": [
                    _webhook(
                        "mleaderworkerset.kb.io",
                        "/mutate-lws",
                        "leaderworkerset.x-k8s.io",
                        "leaderworkersets",
                    ),
                    _webhook("mpod.kb.io", "/mutate--v1-pod", "", "pods"),
                ],
            },
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "validating-webhook-configuration"},
                "webhooks": [
                    _webhook(
                        "vleaderworkerset.kb.io",
                        "/validate-lws",
                        "leaderworkerset.x-k8s.io",
                        "leaderworkersets",
                    ),
                    _webhook("vpod.kb.io", "/validate--v1-pod", "", "pods"),
                ],
            },
        ],
        "webhook/mutating-patch.yaml": [_pod_patch("mpod.kb.io", "/mutate--v1-pod")],
        "webhook/validating-patch.yaml": [_pod_patch("vpod.kb.io", "/validate--v1-pod")],
        "manager/controller_manager_config.yaml": [
            {
                "apiVersion": "config.lws.x-k8s.io/v1alpha1",
                "kind": "Configuration",
                "leaderElection": {"leaderElect": True},
                "internalCertManagement": {"enable": True},
            }
        ],
        "crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml": [
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "leaderworkersets.leaderworkerset.x-k8s.io"},
                "spec": {"group": "leaderworkerset.x-k8s.io", "versions": [{"name": "v1"}]},
            }
        ],
    }
    assert set(files) - {"crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"} == set(LWS_CONFIG_FILES)
    for relative, documents in files.items():
        path = config / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump_all(documents))
        path.chmod(0o444)  # as in the module cache
    return root


def _binaries(tmp_path: Path) -> LwsBinaries:
    cache = tmp_path / "cache"
    copy_config(_module(tmp_path / "module"), cache / "config")
    return LwsBinaries(root=cache, versions=LwsVersions("v0.9.0"))


def _objects(tmp_path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    credentials = generate_credentials(tmp_path / "pki")
    binaries = _binaries(tmp_path)
    return {
        (o["kind"], o["metadata"]["name"]): o
        for o in leaderworkerset.objects(credentials, binaries, leaderworkerset.image_name(binaries))
    }


def test_the_objects_come_in_order_named_as_upstreams_kustomization_names_them(tmp_path: Path) -> None:
    credentials = generate_credentials(tmp_path / "pki")
    binaries = _binaries(tmp_path)
    objects = leaderworkerset.objects(credentials, binaries, "localhost/mmd-local/lws:v0.9.0")
    kinds = [o["kind"] for o in objects]
    assert kinds[:2] == ["Namespace", "CustomResourceDefinition"]
    assert kinds[-2:] == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert {
        ("ServiceAccount", "lws-controller-manager"),
        ("ClusterRole", "lws-manager-role"),
        ("ClusterRoleBinding", "lws-manager-rolebinding"),
        ("Role", "lws-leader-election-role"),
        ("RoleBinding", "lws-leader-election-rolebinding"),
        ("ClusterRole", "lws-proxy-role"),
        ("Deployment", "lws-controller-manager"),
        ("Service", "lws-webhook-service"),
        ("Secret", "lws-webhook-server-cert"),
        ("CustomResourceDefinition", "leaderworkersets.leaderworkerset.x-k8s.io"),
    } <= names
    for body in objects:
        assert body["metadata"]["labels"]["app.kubernetes.io/name"] == "lws"
        cluster_scoped = body["kind"] in (
            "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
            "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
        )  # fmt: skip
        assert ("namespace" in body["metadata"]) != cluster_scoped, body["kind"]
        if not cluster_scoped:
            assert body["metadata"]["namespace"] == "lws-system"
    bindings = [o for o in objects if o["kind"].endswith("Binding")]
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "lws-controller-manager", "namespace": "lws-system"}
        ]
        assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) in names


def test_the_controller_passes_pod_security_restricted_on_a_real_node(tmp_path: Path) -> None:
    objects = _objects(tmp_path)
    namespace = objects[("Namespace", "lws-system")]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = objects[("Deployment", "lws-controller-manager")]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {NODE_KIND_LABEL: REAL}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
    assert container["imagePullPolicy"] == "Never"
    assert container["command"] == ["/manager"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/tmp/k8s-webhook-server/serving-certs"] == "cert"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["cert"]["secret"]["secretName"] == "lws-webhook-server-cert"
    service = objects[("Service", "lws-webhook-service")]["spec"]
    template_labels = objects[("Deployment", "lws-controller-manager")]["spec"]["template"]["metadata"][
        "labels"
    ]
    assert service["selector"].items() <= template_labels.items()
    assert service["ports"][0]["targetPort"] == container["ports"][0]["containerPort"] == 9443


def test_the_certificate_is_the_clusters_and_lws_manages_none_itself(tmp_path: Path) -> None:
    objects = _objects(tmp_path)
    configuration = yaml.safe_load(
        objects[("ConfigMap", "lws-manager-config")]["data"]["controller_manager_config.yaml"]
    )
    assert configuration["internalCertManagement"] == {"enable": False}
    assert configuration["leaderElection"] == {"leaderElect": True}  # the rest is upstream's
    ca = (tmp_path / "pki" / "ca.crt").read_bytes()
    secret = objects[("Secret", "lws-webhook-server-cert")]["data"]
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["tls.crt"]))
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca))
    dns = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "lws-webhook-service.lws-system.svc" in dns.get_values_for_type(x509.DNSName)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        configuration = objects[
            (kind, f"lws-{kind[: -len('WebhookConfiguration')].lower()}-webhook-configuration")
        ]
        for webhook in configuration["webhooks"]:
            client = webhook["clientConfig"]
            assert base64.b64decode(client["caBundle"]) == ca
            assert client["service"]["name"] == "lws-webhook-service"
            assert client["service"]["namespace"] == "lws-system"
            if webhook["rules"][0]["resources"] == ["pods"]:
                # Upstream's patches: the pod webhooks see the groups' pods only, not every pod.
                assert (
                    webhook["objectSelector"]["matchExpressions"][0]["key"] == leaderworkerset.LWS_NAME_LABEL
                )


def test_the_certificate_is_reused_while_the_cluster_ca_signed_it(tmp_path: Path) -> None:
    credentials = generate_credentials(tmp_path / "pki")
    first = leaderworkerset.serving_certificate(credentials)[0].read_bytes()
    assert leaderworkerset.serving_certificate(credentials)[0].read_bytes() == first
    generate_credentials(tmp_path / "other")  # another cluster's CA signed nothing here
    (tmp_path / "pki" / "ca.crt").write_bytes((tmp_path / "other" / "ca.crt").read_bytes())
    assert leaderworkerset.serving_certificate(credentials)[0].read_bytes() != first


def test_the_module_files_are_copied_writable_and_the_crds_found(tmp_path: Path) -> None:
    binaries = _binaries(tmp_path)
    assert [p.name for p in binaries.crds()] == ["leaderworkerset.x-k8s.io_leaderworkersets.yaml"]
    for relative in LWS_CONFIG_FILES:
        assert (binaries.config_dir / relative).stat().st_mode & 0o200


def _checkout(tmp_path: Path, version: str) -> Layout:
    wrapper = tmp_path / "repo" / "testbed" / "go" / "lws"
    wrapper.mkdir(parents=True, exist_ok=True)
    (wrapper / "go.mod").write_text(
        f"module mmd-operator/testbed/go/lws\n\ngo 1.26.0\n\ntool sigs.k8s.io/lws/cmd\n\n"
        f"require (\n\tsigs.k8s.io/lws {version} // indirect\n\tsigs.k8s.io/yaml v1.6.0 // indirect\n)\n"
    )
    (wrapper / "go.sum").write_text(f"sigs.k8s.io/lws {version} h1:abc=\n")
    return Layout(repo_root=tmp_path / "repo", cache_root=tmp_path / "cache" / "controlplane")


def test_the_pinned_version_is_read_from_the_wrapper_and_keys_the_cache(tmp_path: Path) -> None:
    toolchain = Toolchain(go=Path("go"), version="go1.26.8")
    layout = _checkout(tmp_path, "v0.9.0")
    assert layout.lws_versions == LwsVersions("v0.9.0")
    first = layout.lws_cache_dir(toolchain)
    assert first.parent == tmp_path / "cache" / "lws"
    assert first.name.startswith("lws-v0.9.0_go1.26.8_")
    # Any change of the wrapper (here its go.sum alone) is another cache directory.
    (layout.lws_wrapper_dir / "go.sum").write_text("sigs.k8s.io/lws v0.9.0 h1:def=\n")
    assert layout.lws_cache_dir(toolchain) != first
    assert _checkout(tmp_path / "newer", "v0.10.0").lws_cache_dir(toolchain).name.startswith("lws-v0.10.0_")
    assert layout.lws_cache_dir(Toolchain(go=Path("go"), version="go1.27.0")).name != first.name
    # The checkout's own pin.
    assert Layout.discover().lws_versions.lws.startswith("v0.")


def test_the_controller_is_stamped_with_its_version_commit_and_date() -> None:
    (spec,) = lws_binary_specs(LwsVersions("v0.9.0"), "f" * 40, "2026-06-17T17:52:11Z")
    assert (spec.name, spec.package, spec.wrapper) == (LWS_BINARY, "sigs.k8s.io/lws/cmd", "lws")
    assert "-X sigs.k8s.io/lws/pkg/version.GitVersion=v0.9.0" in spec.ldflags
    assert f"-X sigs.k8s.io/lws/pkg/version.GitCommit={'f' * 40}" in spec.ldflags
    assert "-X sigs.k8s.io/lws/pkg/version.BuildDate=2026-06-17T17:52:11Z" in spec.ldflags


def test_the_build_date_is_the_module_versions_time(tmp_path: Path) -> None:
    info = tmp_path / "v0.9.0.info"
    info.write_text('{"Version":"v0.9.0","Time":"2026-06-17T17:52:11Z"}')
    assert release_time({"Info": str(info)}) == "2026-06-17T17:52:11Z"
    assert release_time({}) == "1970-01-01T00:00:00Z"
