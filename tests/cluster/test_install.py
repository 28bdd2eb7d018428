"""The install paths on the real control plane: the Helm chart, the plain manifests made from it, and
least privilege proven by running the operator on nothing but the chart's ServiceAccount token.

Helm and kubectl are the binaries of the local control plane's cache; the operator runs as a process
(`python -m mmd_operator`, the image's entry point) with a kubeconfig holding only a token minted for
the chart's
ServiceAccount, so every request it makes is judged by the chart's roles. The session's own operator
(cluster-admin) is stopped meanwhile, so no other controller does the work.
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from mmd_operator import __version__
from mmd_operator.api import crdgen
from mmd_testbed.localcluster.cluster import LocalCluster
from tests.support.examples import serving_deployment
from tests.support.kube import Kube, Resources, Tools
from tools import chart

from .conftest import OperatorProcess

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / chart.CHART_DIR
LLAVA = ROOT / "examples" / "llava.yaml"
SECTIONS = ("spec", "rules", "subjects", "roleRef", "data")
WARNING_POLICY = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]


def _documents(text: str) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(text) if document]


def _release_namespace(kube: Kube) -> Iterator[str]:
    name = f"mmd-system-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace(
        {"metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    yield name
    kube.core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def release_namespace(kube: Kube) -> Iterator[str]:
    """A namespace for the chart's release, where the API server enforces the restricted pod standard."""
    yield from _release_namespace(kube)


@pytest.fixture
def other_namespace(kube: Kube) -> Iterator[str]:
    """A namespace the operator is not given."""
    yield from _release_namespace(kube)


def _helm_template(tools: Tools, *args: str) -> str:
    return tools.run("helm", "template", "mmd", str(CHART), *args).stdout


# -- the chart ------------------------------------------------------------------------------------


def test_the_chart_lints_strictly_and_the_api_server_accepts_what_it_renders_in_both_modes(
    tools: Tools, release_namespace: str, namespace: str
) -> None:
    chart_yaml = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart_yaml["appVersion"] == __version__
    modes = {"cluster-wide": [], "namespaced": ["--set", f"watchNamespaces={{{namespace}}}"]}
    for mode, values in modes.items():
        tools.run("helm", "lint", "--strict", str(CHART), *values)
        rendered = _helm_template(tools, "-n", release_namespace, *values)
        kinds = sorted(d["kind"] for d in _documents(rendered))
        # Leader election (on by default) is a Role and binding for its Lease in the release's namespace;
        # reading the node Leases (lostNodeSeconds, on by default) one in kube-node-lease.
        # The users' roles are two ClusterRoles; the warnings, the privilege check and the write guard
        # a policy and binding each.
        common = [
            "ServiceAccount", "CustomResourceDefinition", "Service", "Deployment", *WARNING_POLICY,
            *WARNING_POLICY, *WARNING_POLICY, "Role", "RoleBinding", "Role", "RoleBinding",
            "ClusterRole", "ClusterRole",
        ]  # fmt: skip
        # Listing nodes (rbac.readNodes, on by default) is a ClusterRole of its own in both modes.
        nodes = ["ClusterRole", "ClusterRoleBinding"]
        if mode == "cluster-wide":
            assert kinds == sorted([*common, "ClusterRole", "ClusterRoleBinding", *nodes])
        else:
            # A Role and its binding in each watched namespace, and cluster-wide nothing but nodes.
            assert kinds == sorted([*common, "Role", "RoleBinding", *nodes])
            without = _helm_template(tools, "-n", release_namespace, *values, "--set", "rbac.readNodes=false")
            assert sorted(d["kind"] for d in _documents(without)) == sorted([*common, "Role", "RoleBinding"])
            bindings = {
                d["metadata"]["name"].rsplit("-", 1)[1]: d["spec"]
                for d in _documents(rendered)
                if d["kind"] == "ValidatingAdmissionPolicyBinding"
            }
            # The warnings and the privilege check, too, only where the operator is given resources; the
            # write guard is matched to the operator's ServiceAccount, wherever it writes.
            for policy in ("warnings", "privileges"):
                assert bindings[policy]["matchResources"]["namespaceSelector"]["matchExpressions"] == [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]}
                ]
            assert "matchResources" not in bindings["writes"]
        node_role = next(
            d
            for d in _documents(rendered)
            if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-nodes")
        )
        assert node_role["rules"] == [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceslices", "deviceclasses"],
                "verbs": ["list"],
            },
        ]
        lease_role = next(d for d in _documents(rendered) if d["metadata"]["name"].endswith("-node-leases"))
        assert lease_role["metadata"]["namespace"] == "kube-node-lease"
        assert lease_role["rules"] == [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]}
        ]
        off = _documents(
            _helm_template(tools, "-n", release_namespace, *values, "--set", "lostNodeSeconds=0")
        )
        assert not [d for d in off if d["metadata"]["name"].endswith("-node-leases")]
        roles = [d for d in off if d["kind"] in ("Role", "ClusterRole")]
        assert not [r for role in roles for r in role["rules"] if "pods/status" in r["resources"]]
        manifest = Path(tools.env["HOME"]) / f"rendered-{mode}.yaml"
        manifest.write_text(rendered)
        applied = tools.run("kubectl", "apply", "--dry-run=server", "--server-side", "-f", str(manifest))
        assert "serverside-applied (server dry run)" in applied.stdout
    monitor = _helm_template(tools, "--set", "metrics.serviceMonitor.enabled=true")
    assert "kind: ServiceMonitor" in monitor
    without_crd = _helm_template(tools, "--set", "crds.enabled=false")
    assert "CustomResourceDefinition" not in without_crd
    without_policies = _helm_template(
        tools, "--set", "admissionWarnings.enabled=false", "--set", "privilegeCheck.enabled=false",
        "--set", "rbac.writeGuard=false",
    )  # fmt: skip
    assert "ValidatingAdmissionPolicy" not in without_policies
    without_user_roles = _documents(_helm_template(tools, "--set", "rbac.userRoles=false"))
    assert [d["metadata"]["name"] for d in without_user_roles if d["kind"] == "ClusterRole"] == [
        "mmd-mmd-operator", "mmd-mmd-operator-nodes"
    ]  # fmt: skip
    crd = next(d for d in _documents(_helm_template(tools)) if d["kind"] == "CustomResourceDefinition")
    # The chart's CRD is the generated one, never a copy that could age.
    assert crd["spec"] == crdgen.crd()["spec"]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    kept = next(
        d
        for d in _documents(_helm_template(tools, "--set", "crds.keep=false"))
        if d["kind"] == "CustomResourceDefinition"
    )
    assert "annotations" not in kept["metadata"]


def _scraped(monitor: dict[str, Any], deployment: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(container, port name, path) of every endpoint the PodMonitor scrapes on the Deployment's pods."""
    template = deployment["spec"]["template"]
    if not monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items():
        return []
    found = []
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        keep = [r["regex"] for r in endpoint.get("relabelings", []) if r.get("action") == "keep"]
        for container in template["spec"]["containers"]:
            names = {port["name"] for port in container.get("ports", [])}
            if endpoint["port"] in names and all(regex == container["name"] for regex in keep):
                found.append((container["name"], endpoint["port"], endpoint["path"]))
    return found


def test_the_serving_pod_monitor_scrapes_each_runtimes_metrics_once_per_pod(tools: Tools) -> None:
    values = ["--set", "metrics.servingPodMonitor.enabled=true"]
    (monitor,) = [d for d in _documents(_helm_template(tools, *values)) if d["kind"] == "PodMonitor"]
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    # Exactly the endpoint the autoscaler's series come from, on the pods of either runtime.
    assert _scraped(monitor, serving_deployment("llava")) == [("tritonserver", "metrics", "/metrics")]
    assert _scraped(monitor, serving_deployment("qwen2_5_vl")) == [
        ("trtllm-serve", "http", "/prometheus/metrics")
    ]
    namespaced = _helm_template(tools, *values, "--set", "watchNamespaces={team-a,team-b}")
    (scoped,) = [d for d in _documents(namespaced) if d["kind"] == "PodMonitor"]
    assert scoped["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    assert "PodMonitor" not in _helm_template(tools)


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (["--set", "workers=0"], "workers"),
        (["--set", "logging.format=xml"], "format"),
        (["--set", "engineCache.accessMode=ReadMany"], "accessMode"),
        (["--set", "wokers=4"], "wokers"),
        (["--set", "replicaCount=4"], "replicaCount"),
        (["--set", "leaderElection.leaseDurationSeconds=1"], "leaseDurationSeconds"),
    ],
)
def test_the_values_schema_refuses_a_bad_value_by_name(tools: Tools, values: list[str], says: str) -> None:
    result = tools.run("helm", "template", "mmd", str(CHART), *values, check=False)
    assert result.returncode != 0 and "values don't meet the specifications of the schema" in result.stderr
    assert says in result.stderr


def test_every_value_reaches_the_operator_as_its_setting(tools: Tools) -> None:
    rendered = _helm_template(
        tools,
        "--set", "watchNamespaces={a,b}", "--set", "workers=3", "--set", "resyncSeconds=90",
        "--set", "engineCache.storageClassName=fast", "--set", "images.serving=mirror.example/serving:1",
        "--set", "logging.format=json", "--set", "metrics.port=9100", "--set", "rbac.readNodes=false",
    )  # fmt: skip
    deployment = next(d for d in _documents(rendered) if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env["MMD_NAMESPACES"] == "a,b" and env["MMD_WORKERS"] == "3"
    assert env["MMD_RESYNC_SECONDS"] == "90" and env["MMD_ENGINE_CACHE_STORAGE_CLASS"] == "fast"
    assert env["MMD_SERVING_IMAGE"] == "mirror.example/serving:1" and env["MMD_LOG_FORMAT"] == "json"
    assert env["MMD_METRICS_PORT"] == "9100"
    assert {"name": "metrics", "containerPort": 9100} in container["ports"]
    # Every variable is a setting the operator reads.
    from mmd_operator.config import OperatorConfig

    config = OperatorConfig.from_env(env)
    assert config.namespaces == ("a", "b") and config.serving_image == "mirror.example/serving:1"
    assert env["MMD_READ_NODES"] == "false" and config.read_nodes is False
    assert deployment["spec"]["replicas"] == 1


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (
            ["--set", "replicaCount=2", "--set", "leaderElection.enabled=false"],
            "replicaCount=2 needs leaderElection.enabled=true: without an election every replica would "
            "reconcile the same resources",
        ),
        (
            ["--set", "leaderElection.renewDeadlineSeconds=15"],
            "leaderElection needs retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds, so that "
            "a leader stops before anyone may take over; got 2 < 15 < 15",
        ),
    ],
)
def test_the_chart_refuses_values_that_contradict_each_other(
    tools: Tools, values: list[str], says: str
) -> None:
    result = tools.run("helm", "template", "mmd", str(CHART), *values, check=False)
    assert result.returncode != 0 and says in result.stderr, result.stderr


def test_two_replicas_elect_a_leader_spread_over_nodes_and_a_drain_takes_one_at_a_time(
    tools: Tools, release_namespace: str
) -> None:
    rendered = _documents(_helm_template(tools, "-n", release_namespace, "--set", "replicaCount=2"))
    deployment = next(d for d in rendered if d["kind"] == "Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert spec["replicas"] == 2 and env["MMD_LEADER_ELECTION"]["value"] == "true"
    # A new pod waits as a standby until the old one hands the lease over: an update never stops both.
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert env["MMD_LEASE_NAME"]["value"] == "mmd-mmd-operator"
    assert env["MMD_LEASE_NAMESPACE"]["value"] == release_namespace
    assert env["MMD_POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    selector = spec["selector"]["matchLabels"]
    assert pod["affinity"] == {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": selector},
                    },
                }
            ]
        }
    }
    (budget,) = [d for d in rendered if d["kind"] == "PodDisruptionBudget"]
    assert budget["spec"] == {
        "maxUnavailable": 1,
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
        "selector": {"matchLabels": selector},
    }
    (role,) = [d for d in rendered if d["kind"] == "Role" and d["metadata"]["name"].endswith("-election")]
    assert role["metadata"]["name"] == "mmd-mmd-operator-leader-election"
    assert role["metadata"]["namespace"] == release_namespace
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["mmd-mmd-operator"],
            "verbs": ["get", "update"],
        },
    ]
    manifest = Path(tools.env["HOME"]) / "rendered-two-replicas.yaml"
    manifest.write_text(yaml.safe_dump_all([d for d in rendered if d["kind"] != "CustomResourceDefinition"]))
    applied = tools.run("kubectl", "apply", "--dry-run=server", "--server-side", "-f", str(manifest))
    assert "poddisruptionbudget.policy/mmd-mmd-operator serverside-applied (server dry run)" in applied.stdout
    # One replica: no budget (it would block every drain), no spreading; without election, Recreate.
    single = _documents(_helm_template(tools, "--set", "leaderElection.enabled=false"))
    assert "PodDisruptionBudget" not in {d["kind"] for d in single}
    alone = next(d for d in single if d["kind"] == "Deployment")["spec"]
    assert alone["strategy"] == {"type": "Recreate"} and "affinity" not in alone["template"]["spec"]
    assert [d["metadata"]["name"] for d in single if d["kind"] == "Role"] == ["mmd-mmd-operator-node-leases"]


# -- plain manifests ------------------------------------------------------------------------------


def _live(tools: Tools, documents: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The live objects of `documents`, by kind and name, with what the chart decides of each."""
    found = {}
    for document in documents:
        kind, name = document["kind"], document["metadata"]["name"]
        args = ["kubectl", "get", kind, name, "-o", "json"]
        if "namespace" in document["metadata"]:
            args += ["-n", document["metadata"]["namespace"]]
        live = json.loads(tools.run(*args).stdout)
        for allocated in ("clusterIP", "clusterIPs"):  # the API server picks a fresh address each time
            live.get("spec", {}).pop(allocated, None)
        found[(kind, name)] = {
            "labels": live["metadata"].get("labels"),
            **{section: live.get(section) for section in SECTIONS},
        }
    return found


def test_plain_manifests_are_the_chart_and_install_the_same_operator(tools: Tools, binaries: Any) -> None:
    committed = (ROOT / chart.PLAIN_MANIFESTS).read_text()
    assert committed == chart.plain_manifests(binaries.path("helm"), ROOT), (
        f"{chart.PLAIN_MANIFESTS} is stale; run `make generate`"
    )
    documents = [d for d in _documents(committed) if d["kind"] != "Namespace"]
    tools.run("kubectl", "apply", "--server-side", "-f", str(ROOT / "crds"), "-f", str(ROOT / "deploy"))
    try:
        plain = _live(tools, documents)
    finally:
        tools.run("kubectl", "delete", "-f", str(ROOT / "deploy"), "--wait=true", timeout=180)
    tools.run(
        "helm", "install", "mmd-operator", str(CHART), "-n", chart.PLAIN_NAMESPACE, "--create-namespace",
        "--set", "crds.enabled=false",
    )  # fmt: skip
    try:
        helm = _live(tools, documents)
    finally:
        tools.run("helm", "uninstall", "mmd-operator", "-n", chart.PLAIN_NAMESPACE, "--wait")
        tools.run("kubectl", "delete", "namespace", chart.PLAIN_NAMESPACE, "--wait=false")
    assert plain == helm


# -- least privilege, proven by running on it -----------------------------------------------------


def _can(tools: Tools, who: str, *args: str) -> bool:
    result = tools.run("kubectl", "auth", "can-i", f"--as={who}", *args, check=False)
    return result.stdout.strip() == "yes"


@pytest.mark.parametrize("mode", ["cluster-wide", "namespaced"])
def test_the_charts_service_account_alone_runs_a_full_lifecycle_and_nothing_more(
    mode: str,
    kube: Kube,
    tools: Tools,
    local_cluster: LocalCluster,
    operator: OperatorProcess,
    crd: None,
    resources: Resources,
    namespace: str,
    release_namespace: str,
    other_namespace: str,
    tmp_path: Path,
) -> None:
    other = other_namespace
    values = ["--set", "crds.enabled=false"]
    if mode == "namespaced":
        values += ["--set", f"watchNamespaces={{{namespace}}}"]
    release = f"mmd-{mode}"
    tools.run("helm", "install", release, str(CHART), "-n", release_namespace, *values)
    account = f"{release}-mmd-operator"
    who = f"system:serviceaccount:{release_namespace}:{account}"
    token = tools.run("kubectl", "create", "token", account, "-n", release_namespace, "--duration=1h").stdout
    kubeconfig = local_cluster.token_kubeconfig(token.strip(), tmp_path / "token.kubeconfig")
    whoami = tools.run("kubectl", "--kubeconfig", str(kubeconfig), "auth", "whoami", "-o", "json")
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == who

    operator.stop()  # the session's cluster-admin operator: nobody else may do the work
    token_operator = OperatorProcess(
        kubeconfig,
        tmp_path / "operator.log",
        namespaces=(namespace,) if mode == "namespaced" else (),
        command=(sys.executable, "-m", "mmd_operator"),
        # As the chart's pod runs it: electing a leader on the chart's Lease, by the chart's Role.
        MMD_LEADER_ELECTION="true",
        MMD_LEASE_NAME=account,
        MMD_LEASE_NAMESPACE=release_namespace,
    )
    try:
        token_operator.start()
        # Build, serve, change, delete.
        document = yaml.safe_load(LLAVA.read_text())
        document["spec"].setdefault("serving", {})["networkPolicy"] = {}
        resources.apply(document)
        resources.wait_phase("llava", "Building")
        first = resources.wait_phase("llava", "Ready")["status"]
        networking = k8s.NetworkingV1Api(kube.apps.api_client)
        assert [p.metadata.name for p in networking.list_namespaced_network_policy(namespace).items] == [
            "llava"
        ]
        changed = copy.deepcopy(document)
        changed["spec"]["serving"]["streaming"] = True
        del changed["spec"]["serving"]["networkPolicy"]  # the operator deletes the policy
        # ... and creates an autoscaler and a disruption budget, handing the Deployment's replicas over.
        changed["spec"]["serving"]["autoscaling"] = {
            "minReplicas": 1,
            "maxReplicas": 2,
            "metric": {"name": "PendingRequests", "target": 4},
        }
        resources.apply(changed)
        second = resources.wait_phase("llava", "Ready")["status"]
        assert second["modelRepository"] != first["modelRepository"]
        autoscaling = k8s.AutoscalingV2Api(kube.apps.api_client)
        policy = k8s.PolicyV1Api(kube.apps.api_client)
        kube.wait_for(
            "the HorizontalPodAutoscaler and the PodDisruptionBudget",
            lambda: (
                [
                    h.metadata.name
                    for h in autoscaling.list_namespaced_horizontal_pod_autoscaler(namespace).items
                ]
                == ["llava"]
                and [b.metadata.name for b in policy.list_namespaced_pod_disruption_budget(namespace).items]
                == ["llava"]
            ),
        )
        kube.wait_for(
            "the NetworkPolicy to be deleted",
            lambda: not networking.list_namespaced_network_policy(namespace).items,
        )
        if mode == "namespaced":
            # Outside its namespaces the operator sees nothing and touches nothing.
            outside = Resources(kube=kube, custom=resources.custom, namespace=other)
            outside.apply(yaml.safe_load(LLAVA.read_text()))
        resources.delete("llava")
        kube.wait_for(
            "every child of llava to go",
            lambda: (
                not kube.apps.list_namespaced_deployment(namespace).items
                and not kube.core.list_namespaced_service(namespace).items
                and not autoscaling.list_namespaced_horizontal_pod_autoscaler(namespace).items
                and not policy.list_namespaced_pod_disruption_budget(namespace).items
                and not kube.core.list_namespaced_config_map(
                    namespace, label_selector="app.kubernetes.io/instance=llava"
                ).items
            ),
            timeout=90,
        )
        if mode == "namespaced":
            assert "status" not in outside.get("llava") or outside.get("llava")["status"].get("phase") is None
        log = token_operator.output()
        assert "Forbidden" not in log and " 403" not in log, log[-3000:]
    finally:
        token_operator.stop()
        operator.start()

    # What it may do, and a sample of what it must not.
    where = ["-n", namespace]
    assert _can(tools, who, "create", "jobs.batch", *where)
    resource = "multimodaldeployments.serving.multimodal.dev"
    assert _can(tools, who, "patch", resource, "--subresource=status", *where)
    # Once per resource whose replica spans pods: its SSH keys (one create). It reads no Secret.
    assert _can(tools, who, "create", "secrets", *where)
    assert _can(tools, who, "list", "nodes")  # rbac.readNodes, for the scheduling messages
    # lostNodeSeconds: the node Leases, and the Ready condition of a pod on a silent node.
    assert _can(tools, who, "list", "leases.coordination.k8s.io", "-n", "kube-node-lease")
    assert _can(tools, who, "patch", "pods", "--subresource=status", *where)
    assert _can(tools, who, "get", "pods", "--subresource=log", *where)  # a running Job's progress
    lease = ["-n", release_namespace]
    assert _can(tools, who, "update", f"leases.coordination.k8s.io/{account}", *lease)
    assert _can(tools, who, "get", f"leases.coordination.k8s.io/{account}", *lease)
    assert _can(tools, who, "create", "leases.coordination.k8s.io", *lease)
    must_not = [
        ["get", "secrets", *where],
        ["get", "secrets", "-n", "kube-system"],
        ["patch", "secrets", *where],
        ["list", "secrets", *where],
        ["watch", "secrets", *where],
        ["update", "secrets", *where],
        ["delete", "secrets", *where],
        ["create", "pods", *where],
        ["patch", "pods", *where],
        ["delete", "pods", *where],
        ["create", "pods", "--subresource=exec", *where],
        ["update", "leases.coordination.k8s.io/some-node", "-n", "kube-node-lease"],
        ["watch", "leases.coordination.k8s.io", "-n", "kube-node-lease"],
        ["patch", "multimodaldeployments.serving.multimodal.dev", *where],
        ["delete", "multimodaldeployments.serving.multimodal.dev", *where],
        ["patch", "nodes"],
        ["create", "nodes"],
        ["watch", "nodes"],
        ["update", "customresourcedefinitions.apiextensions.k8s.io"],
        ["get", "certificates.cert-manager.io", *where],
        ["create", "clusterrolebindings.rbac.authorization.k8s.io"],
        ["create", "roles.rbac.authorization.k8s.io", *where],
        ["create", "serviceaccounts/token", *where],
        # Only its own Lease, only where the chart put it.
        ["update", "leases.coordination.k8s.io/kube-controller-manager", "-n", "kube-system"],
        ["update", "leases.coordination.k8s.io/someone-elses", *lease],
        ["delete", f"leases.coordination.k8s.io/{account}", *lease],
        ["list", "leases.coordination.k8s.io", *lease],
        ["create", "leases.coordination.k8s.io", *where],
    ]
    if mode == "namespaced":
        # Confined to its namespaces, it may not see or create anything anywhere else.
        must_not += [["create", "secrets", "-n", other], ["list", "events", "-n", other]]
        must_not += [["get", "multimodaldeployments.serving.multimodal.dev", "-n", other]]
        must_not += [["create", "jobs.batch", "-n", other], ["list", "customresourcedefinitions"]]
    allowed = [" ".join(args) for args in must_not if _can(tools, who, *args)]
    assert allowed == [], f"the operator's ServiceAccount may: {allowed}"
    tools.run("helm", "uninstall", release, "-n", release_namespace, "--wait")


# -- upgrade and uninstall ------------------------------------------------------------------------


NEW_FIELD = "sharedMemorySize"


def _previous_chart(directory: Path) -> Path:
    """This chart as its previous version: 0.0.9, whose CRD did not have serving.sharedMemorySize yet."""
    previous = directory / "mmd-operator"
    shutil.copytree(CHART, previous)
    chart_yaml = yaml.safe_load((previous / "Chart.yaml").read_text())
    (previous / "Chart.yaml").write_text(yaml.safe_dump({**chart_yaml, "version": "0.0.9"}))
    older = crdgen.crd()
    spec = older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    serving = spec["properties"]
    del serving["serving"]["properties"][NEW_FIELD]
    serving["serving"]["default"].pop(NEW_FIELD, None)  # the section's filled-in default
    # ... and no rule that reads it (the memory limit above it came later still).
    spec["x-kubernetes-validations"] = [
        rule for rule in spec["x-kubernetes-validations"] if NEW_FIELD not in rule["rule"]
    ]
    (previous / "templates" / "crd.yaml").write_text(chart.crd_template(older))
    return previous


def _crd_has_new_field(api_client: k8s.ApiClient) -> bool:
    name = crdgen.crd()["metadata"]["name"]
    live = api_client.sanitize_for_serialization(
        k8s.ApiextensionsV1Api(api_client).read_custom_resource_definition(name)
    )
    schema = live["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return NEW_FIELD in schema["properties"]["spec"]["properties"]["serving"]["properties"]


def test_helm_upgrade_upgrades_the_crd_and_uninstall_keeps_the_crd_the_resources_and_the_engine_cache(
    kube: Kube,
    tools: Tools,
    api_client: k8s.ApiClient,
    operator: OperatorProcess,
    crd: None,
    resources: Resources,
    namespace: str,
    release_namespace: str,
    tmp_path: Path,
) -> None:
    release = "mmd-upgrade"
    name = crdgen.crd()["metadata"]["name"]
    # The session installed the CRD without Helm; hand it over as `helm` documents for adoption.
    tools.run("kubectl", "label", "crd", name, "app.kubernetes.io/managed-by=Helm", "--overwrite")
    tools.run(
        "kubectl", "annotate", "crd", name, f"meta.helm.sh/release-name={release}",
        f"meta.helm.sh/release-namespace={release_namespace}", "--overwrite",
    )  # fmt: skip
    tools.run("helm", "install", release, str(_previous_chart(tmp_path)), "-n", release_namespace)
    assert not _crd_has_new_field(api_client)
    document = yaml.safe_load(LLAVA.read_text())
    manifest = tmp_path / "llava.yaml"
    with_field = copy.deepcopy(document)
    with_field["metadata"]["namespace"] = namespace
    with_field["spec"].setdefault("serving", {})[NEW_FIELD] = "4Gi"
    manifest.write_text(yaml.safe_dump(with_field))
    refused = tools.run("kubectl", "apply", "--server-side", "-f", str(manifest), check=False)
    assert refused.returncode != 0 and NEW_FIELD in refused.stderr  # the old schema does not know it
    resources.apply(document)
    resources.wait_phase("llava", "Ready")

    tools.run("helm", "upgrade", release, str(CHART), "-n", release_namespace)
    assert _crd_has_new_field(api_client)
    tools.run("kubectl", "apply", "--server-side", "-f", str(manifest))

    # For a moment after a CRD changes, the API server may still answer through the old schema, which
    # prunes the new field: the operator can then see generation 2 without it and roll the pods back
    # once before it sees it again. What must hold is where it ends: the pods carry the new value.
    def rolled_to_new_value() -> bool:
        body = resources.get("llava")
        status = body.get("status") or {}
        deployment = kube.apps.read_namespaced_deployment("llava", namespace)
        shm = [v.empty_dir.size_limit for v in deployment.spec.template.spec.volumes if v.empty_dir]
        return status.get("phase") == "Ready" and status.get("observedGeneration") == 2 and "4Gi" in shm

    kube.wait_for("llava to be Ready on pods with the new field's value", rolled_to_new_value, timeout=150)
    upgraded = resources.get("llava")
    assert upgraded["spec"]["serving"][NEW_FIELD] == "4Gi" and upgraded["metadata"]["generation"] == 2

    tools.run("helm", "uninstall", release, "-n", release_namespace, "--wait")
    assert tools.run("helm", "list", "-n", release_namespace, "-q").stdout.strip() == ""
    assert _crd_has_new_field(api_client)  # kept: crds.keep
    assert resources.get("llava")["status"]["phase"] == "Ready"
    claims = [c.metadata.name for c in kube.core.list_namespaced_persistent_volume_claim(namespace).items]
    assert claims == ["mmd-engine-cache"]
    assert not kube.apps.list_namespaced_deployment(release_namespace).items  # the operator went
