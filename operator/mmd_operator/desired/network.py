"""The optional NetworkPolicy of a MultimodalDeployment's serving pods (`spec.serving.networkPolicy`).

It selects the serving pods (the Deployment's own selector) and denies everything not listed: inference
(HTTP and gRPC) only from the clients the spec names, metrics only from the monitoring namespaces, and
out of the pods only DNS and the address blocks of `egress`; and what the pods of one replica say to each
other, by the replica's shape (`serving.WORKLOADS`: a group's, every port between its pods, for MPI and
NCCL). The Service's ports and the policy's come from the same constants, so they cannot drift apart.
Pure: imports the api models, `serving` and the vocabulary.
"""

from __future__ import annotations

from typing import Any

from mmd_operator.api.v1alpha1 import LabelSelector, MultimodalDeployment, NetworkPolicySpec, NetworkPort
from mmd_operator.desired.serving import WORKLOADS
from mmd_operator.facts import OwnerRef
from mmd_operator.plan.launch import GRPC_PORT, HTTP_PORT, METRICS_PORT
from mmd_operator.vocabulary import kinds, labels, names, ownership

DNS_PORT = 53


def selector(value: LabelSelector) -> dict[str, Any]:
    """`value` as a metav1.LabelSelector; an empty one stays `{}` (everything)."""
    result: dict[str, Any] = {}
    if value.match_labels:
        result["matchLabels"] = dict(value.match_labels)
    if value.match_expressions:
        result["matchExpressions"] = [
            {"key": e.key, "operator": e.operator, **({"values": list(e.values)} if e.values else {})}
            for e in value.match_expressions
        ]
    return result


def _tcp(*numbers: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": number} for number in numbers]


def _port(port: NetworkPort) -> dict[str, Any]:
    rendered: dict[str, Any] = {"protocol": port.protocol, "port": port.port}
    if port.end_port is not None:
        rendered["endPort"] = port.end_port
    return rendered


def dns_egress(dns_namespaces: LabelSelector) -> dict[str, Any]:
    """The egress rule to DNS (UDP and TCP 53) in `dns_namespaces`."""
    return {
        "to": [{"namespaceSelector": selector(dns_namespaces)}],
        "ports": [{"protocol": "UDP", "port": DNS_PORT}, {"protocol": "TCP", "port": DNS_PORT}],
    }


def default_dns_selector() -> LabelSelector:
    """Where DNS answers when the spec says nothing: the default of `dnsNamespaceSelector`."""
    return NetworkPolicySpec().dns_namespace_selector


def network_policy(
    resource: MultimodalDeployment,
    *,
    namespace: str,
    owner: OwnerRef,
    inference_ports: tuple[int, ...] = (HTTP_PORT, GRPC_PORT),
    metrics_port: int = METRICS_PORT,
) -> dict[str, Any] | None:
    """The NetworkPolicy of `resource`'s serving pods, or None when its spec asks for none.

    `inference_ports` and `metrics_port` are the pods' ports (trtllm-serve has one for both).
    """
    spec = resource.spec.serving.network_policy
    if spec is None:
        return None
    ingress: list[dict[str, Any]] = []
    peers = []
    for client in spec.clients:
        peer: dict[str, Any] = {}
        if client.pod_selector is not None:
            peer["podSelector"] = selector(client.pod_selector)
        if client.namespace_selector is not None:
            peer["namespaceSelector"] = selector(client.namespace_selector)
        peers.append(peer)
    if peers:
        # An ingress rule without `from` would admit everyone: no clients, no rule.
        ingress.append({"from": peers, "ports": _tcp(*inference_ports)})
    ingress.append(
        {
            "from": [{"namespaceSelector": selector(spec.monitoring_namespace_selector)}],
            "ports": _tcp(metrics_port),
        }
    )
    egress: list[dict[str, Any]] = [dns_egress(spec.dns_namespace_selector)]
    for allowance in spec.egress:
        block: dict[str, Any] = {"cidr": allowance.cidr}
        if allowance.except_cidrs:
            block["except"] = list(allowance.except_cidrs)
        rule: dict[str, Any] = {"to": [{"ipBlock": block}]}
        if allowance.ports:
            rule["ports"] = [_port(port) for port in allowance.ports]
        egress.append(rule)
    rules = {"policyTypes": ["Ingress", "Egress"], "ingress": ingress, "egress": egress}
    return serving_policy(resource, rules, namespace=namespace, owner=owner)


def serving_policy(
    resource: MultimodalDeployment, rules: dict[str, Any], *, namespace: str, owner: OwnerRef
) -> dict[str, Any]:
    """The NetworkPolicy of `resource`'s serving pods with `rules` (its policy types and their rules).

    With a replica across pods, the pods of its groups reach each other on every port too.
    """
    instance = str(resource.metadata["name"])
    rules = WORKLOADS[resource.spec.parallelism.shape].policy_rules(instance, rules)
    return {
        "apiVersion": kinds.NETWORK_POLICY.api_version,
        "kind": kinds.NETWORK_POLICY.kind,
        "metadata": {
            "name": names.serving(instance),
            "namespace": namespace,
            "labels": labels.for_instance(instance, labels.SERVING),
            "ownerReferences": [ownership.owner_reference(owner, controller=True)],
        },
        "spec": {"podSelector": {"matchLabels": labels.serving_selector(instance)}, **rules},
    }
