"""What the operator may do, and what nobody gains through it, on the real API server.

- The operator's permissions are exactly the table in docs/operations.md: the chart is installed with
  helm, and `kubectl auth can-i --list` for its ServiceAccount (less what any ServiceAccount may do) is
  compared with the table, row by row, cluster-wide, with `watchNamespaces`, and with the optional
  permissions off. Both tables are printed.
- The write guard holds the operator's own ServiceAccount (impersonated, and the operator's own writer on
  the account's token) to the objects it manages: the Secret, the pod status mark, the labels, the Lease.
- The privilege check, with two users: one may create MultimodalDeployments only, one may also create
  pods. Only the second may choose the pods' ServiceAccount, on create and on update; the first still
  edits other fields of a resource the second gave a ServiceAccount.
- The users' roles aggregate into `view` and `edit`, and `kubectl delete all --all` spares models.

Every release is uninstalled at the end of its test (its policies are cluster-wide).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from mmd_operator.desired import groups
from mmd_operator.facts import OwnerRef
from mmd_operator.kube import cache as cached
from mmd_operator.kube.client import KubeClient
from mmd_operator.kube.writes import WriteCount, Writer
from mmd_testbed.localcluster.cluster import LocalCluster
from tests.support.kube import Kube, Resources, Tools, new_namespace
from tools import chart

# The session's operator, had an earlier module on this worker started it, would act on these resources
# with its own (cluster-admin) rights beside the chart's account.
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("no_operator")]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / chart.CHART_DIR
OPERATIONS = ROOT / "docs" / "operations.md"
LLAVA = ROOT / "examples" / "llava.yaml"
MANAGED = "managed namespaces"
LEASE_NAMESPACE = "the Lease's namespace"
NODE_LEASES = "kube-node-lease"
CLUSTER = "cluster"
# A permission row: (verb, resource as kubectl prints it, resource names, where).
Row = tuple[str, str, tuple[str, ...], str]
_CAN_I = re.compile(r"^(\S+)\s+\[[^\]]*\]\s+\[([^\]]*)\]\s+\[([^\]]*)\]\s*$")


@pytest.fixture
def release_namespace(kube: Kube) -> Iterator[str]:
    """A namespace for a release of the chart."""
    name = new_namespace(kube, "mmd-system")
    yield name
    kube.core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def other_namespace(kube: Kube) -> Iterator[str]:
    """A namespace the operator is not given."""
    name = new_namespace(kube, "elsewhere")
    yield name
    kube.core.delete_namespace(name, propagation_policy="Background")


def _install(tools: Tools, release: str, namespace: str, *values: str) -> None:
    tools.run("helm", "install", release, str(CHART), "-n", namespace, "--set", "crds.enabled=false", *values)


def _uninstall(tools: Tools, release: str, namespace: str) -> None:
    tools.run("helm", "uninstall", release, "-n", namespace, "--wait", check=False)


# -- the table --------------------------------------------------------------------------------------


def documented_table(text: str, lease: str) -> set[Row]:
    """The rows of the permission table in docs/operations.md, `<lease>` standing for the Lease's name.

    Raises:
        AssertionError: when the page has no such table.
    """
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| verbs | resource | where |"))
    rows: set[Row] = set()
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        verbs, resource, where, _, _ = (cell.strip() for cell in line.strip("|").split(" | "))
        names = re.findall(r"`([^`]+)`", resource)
        place = where.strip("`")
        for verb in verbs.split(", "):
            rows.add((verb, names[0], tuple(lease if n == "<lease>" else n for n in names[1:]), place))
    assert rows, "docs/operations.md has no permission table"
    return rows


def _removed_by_values(text: str) -> set[tuple[str, str]]:
    """(resource, where) of the rows a chart value removes ("... removes it")."""
    removed = set()
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        if len(cells) == 5 and "removes it" in cells[4]:
            removed.add((re.findall(r"`([^`]+)`", cells[1])[0], cells[2].strip("`")))
    return removed


def can_i(tools: Tools, who: str, namespace: str) -> dict[tuple[str, tuple[str, ...]], set[str]]:
    """`kubectl auth can-i --list` for `who` in `namespace`: verbs by resource and resource names."""
    listing = tools.run("kubectl", "auth", "can-i", "--list", f"--as={who}", "-n", namespace).stdout
    found: dict[tuple[str, tuple[str, ...]], set[str]] = {}
    for line in listing.splitlines()[1:]:
        match = _CAN_I.match(line)
        if match is None:  # a non-resource URL's row
            continue
        key = (match[1], tuple(match[2].split()))
        found.setdefault(key, set()).update(match[3].split())
    return found


def _less(
    rules: dict[tuple[str, tuple[str, ...]], set[str]], *others: dict[tuple[str, tuple[str, ...]], set[str]]
) -> dict[tuple[str, tuple[str, ...]], set[str]]:
    left = {key: set(verbs) for key, verbs in rules.items()}
    for other in others:
        for key, verbs in other.items():
            left.get(key, set()).difference_update(verbs)
    return {key: verbs for key, verbs in left.items() if verbs}


def live_table(tools: Tools, who: str, *, workload: str, lease_namespace: str) -> set[Row]:
    """What `who` may do, from `can-i --list` in a managed namespace, the Lease's and kube-node-lease,
    less what any ServiceAccount of the same namespace may do (the cluster's default roles)."""
    account_namespace = who.split(":")[2]
    nobody = can_i(
        tools, f"system:serviceaccount:{account_namespace}:nobody-{uuid.uuid4().hex[:6]}", workload
    )
    cluster_scoped = set(
        tools.run("kubectl", "api-resources", "--namespaced=false", "-o", "name").stdout.split()
    )
    managed = _less(can_i(tools, who, workload), nobody)
    rows: set[Row] = set()
    for (resource, names), verbs in managed.items():
        where = CLUSTER if resource.split("/")[0] in cluster_scoped else MANAGED
        rows |= {(verb, resource, names, where) for verb in verbs}
    for namespace, where in ((lease_namespace, LEASE_NAMESPACE), (NODE_LEASES, NODE_LEASES)):
        extra = _less(can_i(tools, who, namespace), nobody, managed)
        rows |= {
            (verb, resource, names, where) for (resource, names), verbs in extra.items() for verb in verbs
        }
    return rows


def printed(rows: set[Row]) -> str:
    """A table of `rows`, one line per resource and place, verbs joined."""
    by_resource: dict[tuple[str, tuple[str, ...], str], list[str]] = {}
    for verb, resource, names, where in rows:
        by_resource.setdefault((resource, names, where), []).append(verb)
    lines = [f"{'verbs':40} {'resource':70} where"]
    for (resource, names, where), verbs in sorted(
        by_resource.items(), key=lambda item: (item[0][2], item[0][0])
    ):
        shown = resource + (f" named {','.join(names)}" if names else "")
        lines.append(f"{', '.join(sorted(verbs)):40} {shown:70} {where}")
    return "\n".join(lines)


@pytest.mark.parametrize("mode", ["cluster-wide", "namespaced", "optional-off"])
def test_the_operators_permissions_are_the_table_in_operations_md(
    mode: str, tools: Tools, crd: None, namespace: str, release_namespace: str, other_namespace: str
) -> None:
    release = f"perm-{mode}"
    values = {
        "cluster-wide": [],
        "namespaced": ["--set", f"watchNamespaces={{{namespace}}}"],
        "optional-off": [
            "--set",
            "lostNodeSeconds=0",
            "--set",
            "rbac.readNodes=false",
            "--set",
            "leaderElection.enabled=false",
        ],
    }[mode]
    account = f"{release}-mmd-operator"
    who = f"system:serviceaccount:{release_namespace}:{account}"
    text = OPERATIONS.read_text()
    documented = documented_table(text, account)
    if mode == "optional-off":
        removed = _removed_by_values(text)
        documented = {row for row in documented if (row[1], row[3]) not in removed}
    _install(tools, release, release_namespace, *values)
    try:
        live = live_table(tools, who, workload=namespace, lease_namespace=release_namespace)
        print(f"\n== {mode}: docs/operations.md\n{printed(documented)}")
        print(f"== {mode}: kubectl auth can-i --list\n{printed(live)}")
        assert live == documented, (
            f"granted, not in the table: {sorted(live - documented)}; "
            f"in the table, not granted: {sorted(documented - live)}"
        )
        if mode == "namespaced":
            # Anywhere else, only the cluster-scoped rows (nodes, and the devices of DRA drivers).
            nobody = can_i(tools, f"system:serviceaccount:{release_namespace}:nobody", other_namespace)
            elsewhere = _less(can_i(tools, who, other_namespace), nobody)
            assert {(resource, names) for resource, names in elsewhere} == {
                ("nodes", ()),
                ("resourceslices.resource.k8s.io", ()),
                ("deviceclasses.resource.k8s.io", ()),
            }
    finally:
        _uninstall(tools, release, release_namespace)


# -- the write guard ---------------------------------------------------------------------------------


def _as(api_client: k8s.ApiClient, user: str) -> k8s.ApiClient:
    """A client of the same cluster that impersonates `user` (a ServiceAccount's name gets its groups)."""
    impersonating = k8s.ApiClient(api_client.configuration)
    impersonating.set_default_header("Impersonate-User", user)
    return impersonating


def _refusal(call: Any) -> tuple[int, str]:
    """(status, message) of the API server's answer to `call`; (200, "") when it was admitted."""
    try:
        call()
    except k8s.ApiException as error:
        return error.status, json.loads(error.body)["message"]
    return 200, ""


def _serving_pod(name: str, component: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/managed-by": "mmd-operator", "app.kubernetes.io/component": component}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "registry.example/x:1",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }
            ]
        },
    }


def test_the_write_guard_holds_the_operators_account_to_what_it_manages(
    kube: Kube,
    tools: Tools,
    api_client: k8s.ApiClient,
    local_cluster: LocalCluster,
    crd: None,
    resources: Resources,
    namespace: str,
    release_namespace: str,
    tmp_path: Path,
) -> None:
    release = "guard"
    account = f"{release}-mmd-operator"
    _install(tools, release, release_namespace, "--set", f"watchNamespaces={{{namespace}}}")
    try:
        operator = _as(api_client, f"system:serviceaccount:{release_namespace}:{account}")
        core = k8s.CoreV1Api(operator)
        ours = {"app.kubernetes.io/managed-by": "mmd-operator"}
        kube.wait_for(  # the API server takes a new policy into use within a moment
            "the guard to refuse",
            lambda: (
                _refusal(
                    lambda: core.create_namespaced_config_map(
                        namespace, {"metadata": {"name": "probe"}}, dry_run="All"
                    )
                )[0]
                == 403
            ),
            timeout=60,
        )
        status, said = _refusal(
            lambda: core.create_namespaced_config_map(namespace, {"metadata": {"name": "plain"}})
        )
        assert status == 403 and said.endswith(
            "the operator writes only objects labelled app.kubernetes.io/managed-by: mmd-operator: "
            f'configmaps {namespace}/plain is labelled ""'
        )
        labelled = {"metadata": {"name": "ours", "labels": ours}, "data": {"a": "b"}}
        assert _refusal(lambda: core.create_namespaced_config_map(namespace, labelled)) == (200, "")
        # Taken out of its reach by a label changed by hand: not even deleted.
        kube.core.patch_namespaced_config_map(
            "ours", namespace, {"metadata": {"labels": {"app.kubernetes.io/managed-by": "me"}}}
        )
        status, said = _refusal(lambda: core.delete_namespaced_config_map("ours", namespace))
        assert status == 403 and said.endswith(f'configmaps {namespace}/ours is labelled "me"')
        # Nobody else is held to it.
        kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": "admins"}})

        # Secrets: only a resource's SSH Secret, made by the operator's own writer on the account's token.
        resources.apply(yaml.safe_load(LLAVA.read_text()))
        owner = resources.get("llava")["metadata"]
        status, said = _refusal(
            lambda: core.create_namespaced_secret(
                namespace, {"metadata": {"name": "stolen", "labels": ours}, "stringData": {"token": "x"}}
            )
        )
        assert status == 403 and "creates only the SSH Secret of a MultimodalDeployment" in said
        token = tools.run("kubectl", "create", "token", account, "-n", release_namespace).stdout.strip()
        kubeconfig = local_cluster.token_kubeconfig(token, tmp_path / "token.kubeconfig")
        writer = Writer(
            KubeClient(k8s_config.new_client_from_config(str(kubeconfig)), field_manager="mmd-operator"),
            cached.Cache(),
        )
        shape = groups.ssh_secret("llava", namespace, OwnerRef(name="llava", uid=owner["uid"]))
        made, again, restarted = WriteCount(), WriteCount(), WriteCount()
        writer.create_secret(shape, made)
        writer.create_secret(shape, again)  # known made: nothing sent
        Writer(writer.client, cached.Cache()).create_secret(shape, restarted)  # a new process: 409, kept
        assert (made.applied, again.applied, restarted.applied) == (["Secret/llava-ssh"], [], [])
        first = kube.core.read_namespaced_secret("llava-ssh", namespace)
        assert sorted(first.data) == sorted(
            ["authorized_keys", "id_ed25519", "known_hosts", "ssh_host_ed25519_key"]
        )

        # pods/status: only a serving pod's Ready condition, only to False.
        kube.core.create_namespaced_pod(namespace, _serving_pod("served", "serving"))
        kube.core.create_namespaced_pod(namespace, _serving_pod("built", "engine-build"))
        kube.wait_for(
            "the pods to run",
            lambda: all(
                kube.core.read_namespaced_pod(name, namespace).status.pod_ip for name in ("served", "built")
            ),
        )
        mark = {
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "NodeLeaseExpired"}]}
        }
        assert _refusal(lambda: core.patch_namespaced_pod_status("served", namespace, mark)) == (200, "")
        refused = {
            "another component": ("built", mark),
            "Ready True": ("served", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            "a label": ("served", {"metadata": {"labels": {"app": "payments"}}}),
            "an annotation": ("served", {"metadata": {"annotations": {"a": "b"}}}),
            "the phase": ("served", {"status": {"phase": "Failed"}}),
            "another condition": (
                "served",
                {"status": {"conditions": [{"type": "ContainersReady", "status": "False"}]}},
            ),
        }
        for what, (pod, patch) in refused.items():
            status, said = _refusal(
                lambda pod=pod, patch=patch: core.patch_namespaced_pod_status(pod, namespace, patch)
            )
            assert status == 403 and "may only mark a serving pod not ready" in said, what
        address = kube.core.read_namespaced_pod("served", namespace).status.pod_ip
        moved = {"status": {"podIP": "10.99.0.9", "podIPs": [{"ip": "10.99.0.9"}]}}
        status, said = _refusal(  # a merge patch: the list of addresses replaced
            lambda: core.patch_namespaced_pod_status(
                "served", namespace, moved, _content_type="application/merge-patch+json"
            )
        )
        assert status == 403 and "may only mark a serving pod not ready" in said
        assert kube.core.read_namespaced_pod("served", namespace).status.pod_ip == address

        # Leases: its own, in the Lease's namespace, alone (RBAC cannot narrow the create).
        coordination = k8s.CoordinationV1Api(operator)
        status, said = _refusal(
            lambda: coordination.create_namespaced_lease(
                release_namespace, {"metadata": {"name": "squatter"}}
            )
        )
        assert status == 403 and said.endswith(
            f"the operator writes only its leader-election Lease {release_namespace}/{account}: "
            f"leases {release_namespace}/squatter"
        )
        lease = {"metadata": {"name": account}}
        assert _refusal(lambda: coordination.create_namespaced_lease(release_namespace, lease)) == (200, "")
    finally:
        _uninstall(tools, release, release_namespace)


# -- the privilege check -----------------------------------------------------------------------------


def _kubectl_as(tools: Tools, user: str, *args: str) -> tuple[int, str]:
    """kubectl as `user` (impersonated); the exit code and what it printed, warnings left out."""
    result = tools.run("kubectl", f"--as={user}", *args, check=False)
    said = "\n".join(
        line for line in (result.stdout + result.stderr).splitlines() if not line.startswith("Warning: ")
    )
    return result.returncode, said


def _bind(kube: Kube, namespace: str, user: str, role: str, rules: list[dict[str, Any]]) -> None:
    rbac = k8s.RbacAuthorizationV1Api(kube.core.api_client)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": role}, "rules": rules})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": f"{role}-{user}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


MMD_RULE = {
    "apiGroups": ["serving.multimodal.dev"],
    "resources": ["multimodaldeployments"],
    "verbs": ["get", "list", "watch", "create", "update", "patch"],
}


def test_only_a_user_who_may_create_pods_may_choose_the_pods_service_account(
    kube: Kube, tools: Tools, crd: None, namespace: str, release_namespace: str, tmp_path: Path
) -> None:
    release = "privileges"
    alice, bob = "alice", "bob"  # alice may create MultimodalDeployments; bob may also create pods
    _bind(kube, namespace, alice, "mmd-author", [MMD_RULE])
    _bind(
        kube,
        namespace,
        bob,
        "mmd-and-pod-author",
        [MMD_RULE, {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}],
    )
    document = yaml.safe_load(LLAVA.read_text())
    document["metadata"]["namespace"] = namespace
    document["spec"]["serving"] = {"pod": {"serviceAccountName": "gpu-admin"}}
    manifest = tmp_path / "llava.yaml"
    manifest.write_text(yaml.safe_dump(document))
    apply = ("apply", "--server-side", "-f", str(manifest))
    _install(tools, release, release_namespace, "--set", f"watchNamespaces={{{namespace}}}")
    proof: list[str] = []

    def attempt(user: str, *args: str) -> tuple[int, str]:
        code, said = _kubectl_as(tools, user, *args)
        proof.append(f"$ kubectl --as={user} {' '.join(args)}\n{said}")
        return code, said

    try:
        kube.wait_for(
            "the check to refuse",
            lambda: _kubectl_as(tools, alice, *apply, "--dry-run=server")[0] != 0,
            timeout=60,
        )
        # CREATE: refused to alice, by field, rule, account, user and permission; admitted to bob.
        code, said = attempt(alice, *apply)
        assert code != 0
        assert (
            f"ValidatingAdmissionPolicy '{release}-mmd-operator-privileges' with binding "
            f"'{release}-mmd-operator-privileges' denied request: spec.serving.pod.serviceAccountName: runs "
            "the serving pods as ServiceAccount gpu-admin; Kubernetes lets whoever may create pods in a "
            "namespace run them as any of its ServiceAccounts, with that account's token and roles, and has "
            "no narrower permission to use one; alice may not (it needs create on pods in namespace "
            f"{namespace}): leave the field out (the pods run as the namespace's default ServiceAccount), or "
            "ask for create on pods there"
        ) in said
        assert (attempt(alice, "get", "mmd", "llava", "-n", namespace)[0]) != 0  # nothing was created
        assert attempt(bob, *apply) == (
            0,
            "multimodaldeployment.serving.multimodal.dev/llava serverside-applied",
        )
        # UPDATE: alice edits the other fields of bob's resource, and may not change its account.
        other_field = json.dumps({"spec": {"serving": {"replicas": 2}}})
        assert (
            attempt(alice, "patch", "mmd", "llava", "-n", namespace, "--type=merge", "-p", other_field)[0]
            == 0
        )
        changed = json.dumps({"spec": {"serving": {"pod": {"serviceAccountName": "default"}}}})
        code, said = attempt(alice, "patch", "mmd", "llava", "-n", namespace, "--type=merge", "-p", changed)
        assert (
            code != 0
            and "spec.serving.pod.serviceAccountName: runs the serving pods as ServiceAccount default" in said
        )
        assert attempt(bob, "patch", "mmd", "llava", "-n", namespace, "--type=merge", "-p", changed)[0] == 0
        # The build pods' account, the same way; and the token Secret: readable for her, or not at all.
        build = json.dumps({"spec": {"build": {"pod": {"serviceAccountName": "builder"}}}})
        code, said = attempt(alice, "patch", "mmd", "llava", "-n", namespace, "--type=merge", "-p", build)
        assert (
            code != 0
            and "spec.build.pod.serviceAccountName: runs the build pods as ServiceAccount builder" in said
        )
        _bind(
            kube,
            namespace,
            alice,
            "read-hf",
            [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["hf"], "verbs": ["get"]}],
        )
        gated = {
            "repo": "meta-llama/Llama-3.2-11B-Vision-Instruct",
            "tokenSecretRef": {"name": "hf", "key": "token"},
        }
        token = json.dumps({"spec": {"model": {"source": {"huggingface": gated}}}})
        assert attempt(alice, "patch", "mmd", "llava", "-n", namespace, "--type=merge", "-p", token)[0] == 0
        gated["tokenSecretRef"]["name"] = "ops-token"
        token = json.dumps({"spec": {"model": {"source": {"huggingface": gated}}}})
        code, said = attempt(alice, "patch", "mmd", "llava", "-n", namespace, "--type=merge", "-p", token)
        assert code != 0 and "hands the value of Secret ops-token (key token)" in said
        assert "it needs create on pods or get on that Secret" in said
        print("\n" + "\n\n".join(proof))
    finally:
        _uninstall(tools, release, release_namespace)


# -- the users' roles, and `all` ---------------------------------------------------------------------


def test_users_roles_aggregate_into_view_and_edit_and_delete_all_spares_models(
    kube: Kube, tools: Tools, crd: None, resources: Resources, namespace: str, release_namespace: str
) -> None:
    rbac = k8s.RbacAuthorizationV1Api(kube.core.api_client)
    for user, role in (("carol", "edit"), ("dave", "view")):
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": f"{role}-{user}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            },
        )
    resource = "multimodaldeployments.serving.multimodal.dev"

    def can(user: str, *args: str) -> bool:
        result = tools.run("kubectl", "auth", "can-i", f"--as={user}", "-n", namespace, *args, check=False)
        return result.stdout.strip() == "yes"

    assert not can("carol", "create", resource) and not can("dave", "list", resource)
    release = "roles"
    _install(tools, release, release_namespace)
    try:
        kube.wait_for(
            "the controller manager to aggregate the roles", lambda: can("carol", "create", resource)
        )
        assert can("carol", "delete", resource) and can("carol", "patch", resource, "--subresource=scale")
        assert not can("carol", "patch", resource, "--subresource=status")  # the operator's alone
        kube.wait_for("view to aggregate", lambda: can("dave", "list", resource))
        assert can("dave", "get", resource, "--subresource=status") and not can("dave", "create", resource)
    finally:
        _uninstall(tools, release, release_namespace)

    resources.apply(yaml.safe_load(LLAVA.read_text()))
    deleted = tools.run("kubectl", "delete", "all", "--all", "-n", namespace, "--wait=false")
    assert "multimodaldeployment" not in deleted.stdout + deleted.stderr
    assert resources.get("llava")["metadata"]["name"] == "llava"
    listed = tools.run("kubectl", "get", "ml", "-n", namespace, "-o", "name").stdout.split()
    assert listed == ["multimodaldeployment.serving.multimodal.dev/llava"]
