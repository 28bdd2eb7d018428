"""The uninstall of docs/upgrades.md on the real control plane, for both install paths: the commands are
read from the page and run as written, after a full install serving three resources, and then nothing
of the operator's or the chart's is left, by label or by name, in a namespace or cluster-wide.

The operator runs as a process on a token of the installed ServiceAccount (as tests/cluster/test_install.py
does: kwok's pods run no program); kwok's nodes finish the build and download Jobs. The session's own
operator is stopped meanwhile, and the session's CRD, which the page deletes, is installed again after.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from mmd_operator.api import crdgen
from mmd_operator.vocabulary import names
from mmd_testbed.localcluster import leaderworkerset
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.layout import Layout
from mmd_testbed.localcluster.lwsbinaries import ensure_lws_binaries
from tests.support.kube import Kube, Resources, Tools, install_crd
from tools import chart

from .conftest import OperatorProcess

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "upgrades.md"
RELEASE, NAMESPACE = "mmd-operator", chart.PLAIN_NAMESPACE
OURS = "app.kubernetes.io/managed-by=mmd-operator"
THE_CHARTS = "app.kubernetes.io/part-of=mmd-operator"
CRD = crdgen.crd()["metadata"]["name"]
# An engine, a download and a replica across pods: every kind of object the operator makes.
EXAMPLES = tuple(
    ROOT / "examples" / f"{name}.yaml" for name in ("llava", "qwen2_5_vl", "llava-tp16-two-nodes")
)


def _block_after(text: str, marker: str) -> str:
    """The first fenced block after `marker` in `text`."""
    return text.split(marker, 1)[1].split("```\n", 2)[1]


def documented_commands(heading: str) -> list[list[str]]:
    """The commands of the block under `### heading` of the page, one argv per line."""
    block = _block_after(PAGE.read_text(), f"\n### {heading}\n")
    return [shlex.split(line) for line in block.splitlines() if line.strip()]


def documented_check() -> str:
    """The shell lines the page gives to see that nothing is left."""
    return _block_after(PAGE.read_text(), "To see that nothing is left:")


def _run(tools: Tools, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`argv` as a user runs it from the root of a checkout (the page's paths are relative to it)."""
    result = subprocess.run(
        [str(tools.bin_dir / argv[0]), *argv[1:]],
        cwd=ROOT,
        env=tools.env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def _gone(read: Callable[[], Any]) -> bool:
    try:
        read()
    except k8s.ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def _install_helm(tools: Tools) -> None:
    # The session installed the CRD without Helm; hand it over for adoption, as an earlier install would.
    tools.run("kubectl", "label", "crd", CRD, "app.kubernetes.io/managed-by=Helm", "--overwrite")
    tools.run(
        "kubectl", "annotate", "crd", CRD, f"meta.helm.sh/release-name={RELEASE}",
        f"meta.helm.sh/release-namespace={NAMESPACE}", "--overwrite",
    )  # fmt: skip
    _run(tools, ["helm", "install", RELEASE, "charts/mmd-operator", "-n", NAMESPACE, "--create-namespace"])


def _install_plain(tools: Tools) -> None:
    _run(tools, ["kubectl", "apply", "--server-side", "-f", "crds/", "-f", "deploy/"])


PATHS = {
    "With Helm": _install_helm,
    "With the plain manifests": _install_plain,
}


def _serve_three(kube: Kube, resources: Resources, namespace: str) -> None:
    """The three examples, served: the engine's and the download's resources Ready, the group's keys made."""
    for path in EXAMPLES:
        resources.apply(yaml.safe_load(path.read_text()))
    resources.wait_phase("llava", "Ready")
    resources.wait_phase("qwen2-5-vl", "Ready")
    kube.wait_for(
        "llava-tp16's SSH Secret",
        lambda: kube.core.read_namespaced_secret(names.ssh_secret("llava-tp16"), namespace),
        timeout=180,
    )


def _ours(tools: Tools, selector: str, namespaces: tuple[str, ...] = ()) -> list[str]:
    """Every object of any listable kind that `selector` selects (`kind/name`): cluster-scoped ones and
    those in `namespaces`, or in any namespace when none is given."""

    def kinds(*scope: str) -> str:
        listed = tools.run("kubectl", "api-resources", "--verbs=list", *scope, "-o", "name")
        return ",".join(listed.stdout.split())

    def names(*where: str) -> list[str]:
        return tools.run("kubectl", "get", *where, "-l", selector, "-o", "name").stdout.split()

    if not namespaces:
        return sorted(names(kinds(), "--all-namespaces"))
    found = names(kinds("--namespaced=false"))
    for namespace in namespaces:
        found += names(kinds("--namespaced=true"), "-n", namespace)
    return sorted(found)


def _named_ours(kube: Kube) -> list[str]:
    """The chart's cluster-scoped objects and node-lease roles, found by name."""
    rbac = k8s.RbacAuthorizationV1Api(kube.core.api_client)
    admission = k8s.AdmissionregistrationV1Api(kube.core.api_client)
    listings = {
        "clusterrole": rbac.list_cluster_role().items,
        "clusterrolebinding": rbac.list_cluster_role_binding().items,
        "role": rbac.list_namespaced_role("kube-node-lease").items,
        "rolebinding": rbac.list_namespaced_role_binding("kube-node-lease").items,
        "validatingadmissionpolicy": admission.list_validating_admission_policy().items,
        "validatingadmissionpolicybinding": admission.list_validating_admission_policy_binding().items,
    }
    return [
        f"{kind}/{item.metadata.name}"
        for kind, items in listings.items()
        for item in items
        if item.metadata.name.startswith(RELEASE)
    ]


def _aggregated_rules(kube: Kube) -> list[str]:
    """The built-in roles' rules on MultimodalDeployments (the chart's user roles aggregate into them)."""
    rbac = k8s.RbacAuthorizationV1Api(kube.core.api_client)
    return [
        role
        for role in ("view", "edit", "admin")
        for rule in rbac.read_cluster_role(role).rules or []
        if "multimodaldeployments" in (rule.resources or [])
    ]


def _lws_served(api_client: k8s.ApiClient) -> bool:
    crds = k8s.ApiextensionsV1Api(api_client).list_custom_resource_definition().items
    return any(crd.spec.group == leaderworkerset.GROUP for crd in crds)


def _install_lws_crds(api_client: k8s.ApiClient) -> list[str]:
    bodies = leaderworkerset.crds(ensure_lws_binaries(Layout.discover(), say=print))
    for body in bodies:
        k8s.ApiextensionsV1Api(api_client).create_custom_resource_definition(body)
    created = [body["metadata"]["name"] for body in bodies]
    leaderworkerset.wait_established(api_client, created, 60, time.sleep)
    return created


def _wait_until_the_gc_collects_lws(kube: Kube, namespace: str) -> None:
    """Until a LeaderWorkerSet whose owner is deleted goes: the garbage collector watches a kind only from
    its next discovery (every 30 s), and a group made before then, whose owner's kind is gone by the time
    it looks, would stay for good ("unable to get REST mapping")."""
    custom = k8s.CustomObjectsApi(kube.core.api_client)
    lws = (leaderworkerset.GROUP, leaderworkerset.VERSION, namespace, leaderworkerset.PLURAL)

    def collected() -> bool:
        owner = kube.core.create_namespaced_config_map(namespace, {"metadata": {"generateName": "gc-probe-"}})
        group = leaderworkerset.probe_group(owner.metadata.name, "probe")
        group["metadata"].update(
            namespace=namespace,
            ownerReferences=[{"apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name,
                              "uid": owner.metadata.uid}],
        )  # fmt: skip
        custom.create_namespaced_custom_object(*lws, group)
        kube.core.delete_namespaced_config_map(owner.metadata.name, namespace)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if _gone(lambda: custom.get_namespaced_custom_object(*lws, owner.metadata.name)):
                return True
            time.sleep(0.5)
        custom.delete_namespaced_custom_object(*lws, owner.metadata.name)
        return False

    kube.wait_for("the garbage collector to collect LeaderWorkerSets", collected, timeout=120)


@pytest.mark.parametrize("path", list(PATHS))
def test_the_documented_uninstall_leaves_nothing_of_ours(
    path: str,
    kube: Kube,
    tools: Tools,
    api_client: k8s.ApiClient,
    local_cluster: LocalCluster,
    operator: OperatorProcess,
    crd: None,
    resources: Resources,
    namespace: str,
    tmp_path: Path,
) -> None:
    commands = documented_commands(path)
    extensions = k8s.ApiextensionsV1Api(api_client)
    kube.wait_for(
        f"no namespace {NAMESPACE} left by an earlier test",
        lambda: _gone(lambda: kube.core.read_namespace(NAMESPACE)),
        timeout=120,
    )
    lws_crds = [] if _lws_served(api_client) else _install_lws_crds(api_client)
    _wait_until_the_gc_collects_lws(kube, namespace)
    operator.stop()  # the session's cluster-admin operator: the installed one does the work
    installed = OperatorProcess(
        tmp_path / "token.kubeconfig",
        tmp_path / "operator.log",
        command=(sys.executable, "-m", "mmd_operator"),
        # As the installed pod runs: electing a leader on its Lease (named after the release), by its Role.
        MMD_LEADER_ELECTION="true",
        MMD_LEASE_NAME=RELEASE,
        MMD_LEASE_NAMESPACE=NAMESPACE,
    )
    try:
        PATHS[path](tools)
        token = tools.run("kubectl", "create", "token", RELEASE, "-n", NAMESPACE, "--duration=1h").stdout
        local_cluster.token_kubeconfig(token.strip(), installed.kubeconfig)
        installed.start()
        _serve_three(kube, resources, namespace)

        # What the uninstall must remove is there: the operator's objects, the chart's, the Lease.
        before = _ours(tools, OURS)
        for kind, name in [
            ("persistentvolumeclaim", "mmd-engine-cache"),
            ("configmap", names.engine_index("mmd-engine-cache")),
            ("secret", names.ssh_secret("llava-tp16")),
            ("deployment.apps", "llava"),
            ("networkpolicy.networking.k8s.io", "qwen2-5-vl"),
        ]:
            assert f"{kind}/{name}" in before, before
        assert [f"lease/{RELEASE}"] == [
            f"lease/{lease.metadata.name}"
            for lease in k8s.CoordinationV1Api(api_client).list_namespaced_lease(NAMESPACE).items
        ]
        assert _ours(tools, THE_CHARTS) and _named_ours(kube) and _aggregated_rules(kube)

        for argv in commands:
            if argv[:2] == ["helm", "uninstall"] or (
                argv[:3] == ["kubectl", "delete", "-f"] and "deploy/" in argv
            ):
                installed.stop()  # the operator's pod goes with this command
            _run(tools, argv, timeout=660 if argv[1] == "wait" else 240)
        installed.stop()

        kube.wait_for(
            f"namespace {NAMESPACE} to go", lambda: _gone(lambda: kube.core.read_namespace(NAMESPACE))
        )
        kube.wait_for("the CRD to go", lambda: _gone(lambda: extensions.read_custom_resource_definition(CRD)))
        # The garbage collector removes what the resources owned in the background (a LeaderWorkerSet has no
        # pods here to wait for: kwok runs no LeaderWorkerSet controller), so it may lag the last command.
        # Earlier tests' namespaces, still being deleted on a busy cluster, are not this test's to judge.
        kube.wait_for(
            "the garbage collector to remove what they owned",
            lambda: not _ours(tools, OURS, (namespace, NAMESPACE)),
            explain=lambda: f"left: {_ours(tools, OURS, (namespace, NAMESPACE))}",
        )
        assert _ours(tools, THE_CHARTS) == []
        assert _named_ours(kube) == []
        kube.wait_for("the built-in roles to lose the chart's rules", lambda: _aggregated_rules(kube) == [])
        assert tools.run("helm", "list", "--all-namespaces", "-q").stdout.split() == []
        # The page's own check says the same.
        check = subprocess.run(
            ["bash", "-c", documented_check()],
            cwd=ROOT,
            env=tools.env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert check.returncode == 0 and check.stdout == "", check.stdout + check.stderr
        assert check.stderr.count("No resources found") == 2, check.stderr
    finally:
        installed.stop()
        _leave_the_session_as_it_was(tools, api_client, lws_crds)
        operator.start()


def _leave_the_session_as_it_was(tools: Tools, api_client: k8s.ApiClient, lws_crds: list[str]) -> None:
    """Whatever the test got to: no release, no operator of the plain manifests, and the session's CRD."""
    tools.run("helm", "uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", "--wait", check=False)
    tools.run("kubectl", "delete", "-f", str(ROOT / "deploy"), "--ignore-not-found", check=False, timeout=180)
    extensions = k8s.ApiextensionsV1Api(api_client)

    def settled() -> bool:
        try:
            return extensions.read_custom_resource_definition(CRD).metadata.deletion_timestamp is None
        except k8s.ApiException as error:
            return error.status == 404

    Kube.of(api_client).wait_for("the CRD to be deleted or not being deleted", settled)
    install_crd(api_client)  # the session's, for the tests after this one
    for name in lws_crds:
        extensions.delete_custom_resource_definition(name)
