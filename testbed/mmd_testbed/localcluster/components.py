"""The control plane's five components: the command line that starts each, and the health check that asks it.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler as plain processes on loopback (the API
server on the node bridge when real nodes run), and kwok, which plays the fake GPU nodes' kubelets. The
flags hold what makes a fault play out within a test (a lost node's pods leave after 20 s, the autoscaler
reads every 5 s). Imports the standard library and `audit`, `binaries`, `pki` and `state` of this package.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request

from mmd_testbed.localcluster.audit import audit_flags
from mmd_testbed.localcluster.binaries import Binaries
from mmd_testbed.localcluster.pki import FRONT_PROXY_CLIENT
from mmd_testbed.localcluster.state import ClusterFiles, ClusterState

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
PORT_NAMES = ("etcd-client", "etcd-peer", *COMPONENTS[1:])
_SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
_POD_CIDR = "10.244.0.0/16"
_NODE_LEASE_SECONDS = 20
# A restarted kwok takes the nodes' leases over only when the old holder's have run out, and after an API
# server outage kwok was seen renewing again only a minute later: the grace period must outlast both, or
# every node would turn NotReady for a moment (and kwok, unlike a kubelet, never marks the pods ready
# again).
_NODE_MONITOR_GRACE_SECONDS = 120
_LOST_NODE_TOLERATION_SECONDS = 20
HPA_SYNC_SECONDS = 5
# The scheduler tries a pod it set aside as unschedulable again after this long even when no event says
# anything changed (upstream: 5 minutes; it checks every 30 s, so a pod waits at most this plus 30 s). An
# event can be missed: the queue's handler of a PV Add may retry a pod before the volume-binding plugin's
# own cache of PVs, fed by another handler of the same informer, has the PV, and the pod is set aside with
# "bound to non-existent pv(s)" with nothing left to wake it (kubernetes/kubernetes#93552).
UNSCHEDULABLE_RETRY_SECONDS = 10


def _delegated_auth_flags(state: ClusterState, component: str, files: ClusterFiles) -> list[str]:
    """Return the flags shared by the controller manager and the scheduler."""
    kubeconfig = str(files.kubeconfig)
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={state.ports[component]}",
        "--leader-elect=false",
        f"--tls-cert-file={files.credentials.serving_cert}",
        f"--tls-private-key-file={files.credentials.serving_key}",
    ]


def _real_node_apiserver_flags(state: ClusterState, files: ClusterFiles) -> list[str]:
    """The API server's flags for kubelets: client certificates, NodeRestriction, a kubelet client."""
    if state.network is None:
        return []
    pki = files.credentials
    return [
        f"--client-ca-file={pki.ca_cert}",
        "--enable-admission-plugins=NodeRestriction",
        f"--kubelet-client-certificate={pki.directory / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki.directory / 'apiserver-kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki.ca_cert}",
        "--kubelet-preferred-address-types=InternalIP",
    ]


def _aggregation_flags(files: ClusterFiles) -> list[str]:
    """The aggregation layer's flags, so an APIService (a metrics adapter's) can be registered.

    The API server proxies to it with the front proxy's client certificate, and at its endpoints'
    addresses: no kube-proxy runs beside the API server (a host process, not on a node).
    """
    pki = files.credentials
    return [
        f"--requestheader-client-ca-file={pki.front_proxy_ca_cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.front_proxy_client_cert}",
        f"--proxy-client-key-file={pki.front_proxy_client_key}",
        "--enable-aggregator-routing=true",
    ]


def _real_node_controller_flags(state: ClusterState) -> list[str]:
    """The controller manager's node IPAM: a pod /24 per node from the cluster's pod range."""
    network = state.network
    if network is None:
        return []
    return [
        "--allocate-node-cidrs=true",
        f"--cluster-cidr={network.cluster_cidr}",
        "--node-cidr-mask-size=24",
        f"--service-cluster-ip-range={network.service_cidr}",
    ]


def command(component: str, *, state: ClusterState, binaries: Binaries, files: ClusterFiles) -> list[str]:
    """The command line that starts `component` of the cluster whose state is `state`."""
    ports = state.ports
    pki = files.credentials
    kubeconfig = str(files.kubeconfig)
    serving = [f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}"]
    binary = str(binaries.path(component))
    if component == "etcd":
        client = f"http://127.0.0.1:{ports['etcd-client']}"
        peer = f"http://127.0.0.1:{ports['etcd-peer']}"
        return [
            binary,
            "--name=default",
            f"--data-dir={files.etcd_data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            # Throwaway data: fsync buys nothing and costs the 2-core machines a lot.
            "--unsafe-no-fsync=true",
            "--auto-compaction-retention=1",
            "--log-level=warn",
        ]
    if component == "kube-apiserver":
        return [
            binary,
            f"--etcd-servers=http://127.0.0.1:{ports['etcd-client']}",
            f"--bind-address={state.address}",
            # Without it a loopback bind address makes the server look for a default route.
            f"--advertise-address={state.address}",
            f"--secure-port={ports['kube-apiserver']}",
            *_real_node_apiserver_flags(state, files),
            *serving,
            f"--token-auth-file={pki.token_file}",
            # Nodes are authorized as nodes (what NodeRestriction then narrows further).
            f"--authorization-mode={'Node,RBAC' if state.network else 'RBAC'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.service_account_public_key}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--service-cluster-ip-range={_service_range(state)}",
            "--allow-privileged=true",
            "--enable-priority-and-fairness=false",
            # Pods leave a lost node after 20 s instead of 5 min, so a node fault plays out in a test.
            f"--default-unreachable-toleration-seconds={_LOST_NODE_TOLERATION_SECONDS}",
            f"--default-not-ready-toleration-seconds={_LOST_NODE_TOLERATION_SECONDS}",
            "--profiling=false",
            *_aggregation_flags(files),
            *audit_flags(files.audit_policy, files.audit_log),
        ]
    if component == "kube-controller-manager":
        return [
            binary,
            *_delegated_auth_flags(state, component, files),
            f"--service-account-private-key-file={pki.service_account_key}",
            f"--root-ca-file={pki.ca_cert}",
            "--node-monitor-period=5s",
            f"--node-monitor-grace-period={_NODE_MONITOR_GRACE_SECONDS}s",
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            # HorizontalPodAutoscalers read their metrics every 5 s (upstream: 15 s), so a scale-up on
            # the metrics path (`up --metrics`) plays out within a test.
            f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_SECONDS}s",
            "--profiling=false",
            *_real_node_controller_flags(state),
        ]
    if component == "kube-scheduler":
        return [
            binary,
            *_delegated_auth_flags(state, component, files),
            "--profiling=false",
            # Deprecated, but the one setting of it (the scheduler's configuration file has none).
            f"--pod-max-in-unschedulable-pods-duration={UNSCHEDULABLE_RETRY_SECONDS}s",
        ]
    if component == "kwok":
        return [
            binary,
            f"--kubeconfig={kubeconfig}",
            f"--config={files.kwok_config}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.1",
            f"--cidr={_POD_CIDR}",
            f"--node-lease-duration-seconds={_NODE_LEASE_SECONDS}",
            f"--server-address=127.0.0.1:{ports['kwok']}",
        ]
    raise ValueError(f"unknown component {component}")


def _health_url(state: ClusterState, component: str) -> str:
    ports = state.ports
    if component == "etcd":
        return f"http://127.0.0.1:{ports['etcd-client']}/health"
    if component == "kwok":
        return f"http://127.0.0.1:{ports['kwok']}/healthz"
    if component == "kube-apiserver":
        return f"https://{state.address}:{ports['kube-apiserver']}/readyz"
    return f"https://127.0.0.1:{ports[component]}/healthz"


def probe(component: str, *, state: ClusterState, files: ClusterFiles) -> tuple[bool, str]:
    """Return (healthy, what the health endpoint said)."""
    request = urllib.request.Request(_health_url(state, component))
    context = None
    if request.full_url.startswith("https:"):
        context = ssl.create_default_context(cafile=str(files.credentials.ca_cert))
        if component == "kube-apiserver":
            request.add_header("Authorization", f"Bearer {files.credentials.token()}")
    try:
        with urllib.request.urlopen(request, timeout=3, context=context) as response:
            body = response.read().decode(errors="replace").strip()
    except urllib.error.HTTPError as error:
        error.close()  # it holds the answer's connection, else closed only when collected
        return False, f"HTTP {error.code}"
    except (OSError, ValueError) as error:
        return False, str(getattr(error, "reason", error))
    if component == "etcd":
        return '"health":"true"' in body, body
    return body == "ok", body


def _service_range(state: ClusterState) -> str:
    network = state.network
    return _SERVICE_CLUSTER_IP_RANGE if network is None else network.service_cidr
