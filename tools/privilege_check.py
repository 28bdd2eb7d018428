"""The chart's privilege check: no user gains, through a MultimodalDeployment, what only a pod's creator has.

The operator's pods run with what their spec gives them, and the operator creates them with its own rights,
not its user's. Kubernetes leaves some choices to whoever may create a pod in a namespace, and has no
narrower permission for them: the ServiceAccount it runs as (its token and its roles), the Secrets it
reads and the claims it mounts, its labels and annotations (Services and NetworkPolicies select pods by
label; a cluster's integrations read annotations). So the spec fields that make those choices for the
operator's pods (`POWERS`) may be set, or changed, only by a user who may create pods in the namespace
(or, for the token Secret, read that Secret); `spec.serving.networkPolicy` only by one who may create
NetworkPolicies there, since NetworkPolicies add up and the operator's can open what others close.

The fields are checked on CREATE when set, and on UPDATE only when changed (compared with the stored
object): a user who may only edit MultimodalDeployments still changes other fields of one whose
ServiceAccount an administrator chose. The other pod settings give nothing a namespace's own admission
does not already hold a pod to, whoever creates it: priorityClassName (ResourceQuota's scopes),
nodeSelector, affinity and tolerations (the PodNodeSelector and PodTolerationRestriction admission
plugins, taints), resources (LimitRange, ResourceQuota), the images (Pod Security; the operator sets the
security context).

`template` writes `templates/privilege-check.yaml`: a ValidatingAdmissionPolicy (validationActions Deny)
whose checks are the API server's own authorizer, asked as the requesting user, and its binding, confined
to `watchNamespaces` when they are set. Imports PyYAML and the api's names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from mmd_operator.api.v1alpha1 import GROUP, PLURAL, VERSION

NAME = '{{ include "mmd-operator.fullname" . }}-privileges'
LABELS = '  labels:\n    {{- include "mmd-operator.labels" . | nindent 4 }}\n'
# The chart's default engine-cache claim, which every resource shares unless it names another.
_DEFAULT_CLAIM = "@default-claim@"
_DEFAULT_CLAIM_VALUE = "{{ .Values.engineCache.claimName }}"


@dataclass(frozen=True)
class Permission:
    """Who may make a choice: the variable that asks the authorizer, and the permission in words."""

    variable: str
    expression: str
    words: str


PODS = Permission(
    "mayCreatePods",
    "authorizer.group('').resource('pods').namespace(request.namespace).check('create').allowed()",
    "create on pods",
)
NETWORK_POLICIES = Permission(
    "mayCreateNetworkPolicies",
    "authorizer.group('networking.k8s.io').resource('networkpolicies').namespace(request.namespace)"
    ".check('create').allowed()",
    "create on networkpolicies.networking.k8s.io",
)
CLAIM_TEMPLATES = Permission(
    "mayCreateClaimTemplates",
    "authorizer.group('resource.k8s.io').resource('resourceclaimtemplates').namespace(request.namespace)"
    ".check('create').allowed()",
    "create on resourceclaimtemplates.resource.k8s.io",
)
TOKEN_PATH = "spec.model.source.huggingface.tokenSecretRef"
# The token Secret: whoever may read it may hand it to a pod, as whoever may create pods may.
READ_TOKEN = Permission(
    "mayReadTokenSecret",
    f"authorizer.group('').resource('secrets').namespace(request.namespace).name(object.{TOKEN_PATH}.name)"
    ".check('get').allowed()",
    "get on that Secret",
)


@dataclass(frozen=True)
class PodPower:
    """A spec field that makes, for the operator's pods, a choice Kubernetes leaves to a pod's creator."""

    id: str
    path: str
    """The field, as `kubectl explain` spells it."""
    gives: str
    """CEL string expression: what the field gives the pods, with its value."""
    why: str
    """Literal text: who may make this choice, and why no one else may."""
    fix: str
    """Literal text: what to do instead."""
    permissions: tuple[Permission, ...] = (PODS,)
    """Any one of them is enough."""
    collection: bool = False
    """A list or map: set means not empty."""
    unless: str = ""
    """CEL over `object`: a value that gives nothing (the shared default)."""


def _value(path: str) -> str:
    return f"object.{path}"


_IDENTITY = (
    "Kubernetes lets whoever may create pods in a namespace run them as any of its ServiceAccounts, with "
    "that account's token and roles, and has no narrower permission to use one"
)
_PULL = "whoever may create pods in a namespace may name any of its Secrets for the kubelet's image pulls"
_LABELS = (
    "Services and NetworkPolicies select pods by label, so a label gives a pod the requests and the network "
    "access meant for the pods it names; only whoever may create pods in a namespace may label one"
)
_ANNOTATIONS = (
    "a cluster's integrations read pods' annotations (a cloud role, an extra network, a sidecar's "
    "settings); only whoever may create pods in a namespace may annotate one"
)
_CLAIM = (
    "a claim's data is for the pods that mount it, and only whoever may create pods in a namespace may "
    "mount one of its claims into a pod"
)


def _pods(role: str) -> tuple[PodPower, ...]:
    pod = f"spec.{role}.pod"
    return (
        PodPower(
            f"{role}ServiceAccount",
            f"{pod}.serviceAccountName",
            f"'runs the {role} pods as ServiceAccount ' + {_value(f'{pod}.serviceAccountName')}",
            _IDENTITY,
            "leave the field out (the pods run as the namespace's default ServiceAccount)",
        ),
        PodPower(
            f"{role}ImagePullSecrets",
            f"{pod}.imagePullSecrets",
            f"'has the kubelet pull the {role} pods\\' images with Secret ' + "
            f"{_value(f'{pod}.imagePullSecrets')}.map(s, s.name).join(', ')",
            _PULL,
            "leave the field out (the pull Secrets of the namespace's default ServiceAccount apply)",
            collection=True,
        ),
        PodPower(
            f"{role}Labels",
            f"{pod}.labels",
            f"'labels the {role} pods ' + {_value(f'{pod}.labels')}.map(k, k + '=' + "
            f"{_value(f'{pod}.labels')}[k]).join(', ')",
            _LABELS,
            "leave the labels out (the pods carry the operator's own)",
            collection=True,
        ),
        PodPower(
            f"{role}Annotations",
            f"{pod}.annotations",
            f"'annotates the {role} pods ' + {_value(f'{pod}.annotations')}.map(k, k).join(', ')",
            _ANNOTATIONS,
            "leave the annotations out",
            collection=True,
        ),
    )


POWERS: tuple[PodPower, ...] = (
    *_pods("build"),
    *_pods("serving"),
    PodPower(
        "tokenSecret",
        TOKEN_PATH,
        f"'hands the value of Secret ' + {_value(TOKEN_PATH)}.name + ' (key ' + {_value(TOKEN_PATH)}.key + "
        "') to the build or download pod, which runs the image the spec chooses'",
        "a pod's creator may read any Secret of its namespace; anyone else must be one who may read this one",
        "name a Secret you may read",
        permissions=(PODS, READ_TOKEN),
    ),
    PodPower(
        "sourceClaim",
        "spec.model.source.pvc.claimName",
        f"'mounts PersistentVolumeClaim ' + {_value('spec.model.source.pvc.claimName')} + "
        "' into the build and serving pods'",
        _CLAIM,
        "name a claim of your own making only once you may create pods, or take the model from the Hub",
    ),
    PodPower(
        "loraClaim",
        "spec.model.lora.source.pvc.claimName",
        f"'mounts PersistentVolumeClaim ' + {_value('spec.model.lora.source.pvc.claimName')} + "
        "' into the build pods'",
        _CLAIM,
        "take the adapter from the Hub",
    ),
    PodPower(
        "engineCacheClaim",
        "spec.engineCache.claimName",
        f"'mounts PersistentVolumeClaim ' + {_value('spec.engineCache.claimName')} + "
        "' into the build pods, writable, and into the serving pods'",
        _CLAIM,
        "leave the field out (the namespace's shared engine cache, " + _DEFAULT_CLAIM + ")",
        unless=f"{_value('spec.engineCache.claimName')} == '{_DEFAULT_CLAIM}'",
    ),
    PodPower(
        "networkPolicy",
        "spec.serving.networkPolicy",
        "'becomes a NetworkPolicy the operator writes for the serving pods'",
        "NetworkPolicies add up, so one can open to the pods what a namespace's other policies close; only "
        "whoever may create NetworkPolicies in a namespace may write one",
        "leave the field out",
        permissions=(NETWORK_POLICIES,),
    ),
    PodPower(
        "gpuClaim",
        "spec.gpus.resourceClaim",
        "'becomes a ResourceClaimTemplate the operator writes, from which the pods claim devices'",
        "a claim can ask for any device a DeviceClass offers, so only whoever may create "
        "ResourceClaimTemplates in a namespace may have the operator write one",
        "leave the field out (the pods ask for nvidia.com/gpu)",
        permissions=(CLAIM_TEMPLATES,),
    ),
)


# The pod settings that give nothing a namespace's own admission does not hold a pod to, whoever creates
# it (ResourceQuota's scopes, LimitRange, the PodNodeSelector and PodTolerationRestriction plugins,
# taints): not checked.
NOT_CHECKED = ("priorityClassName", "nodeSelector", "affinity", "tolerations", "resources")


def _has(variable: str, path: str) -> str:
    steps = path.split(".")
    return " && ".join(f"has({variable}.{'.'.join(steps[: i + 1])})" for i in range(len(steps)))


def present(power: PodPower) -> str:
    """CEL over `object`: the field is set (a list or map: not empty), to a value that gives something."""
    found = _has("object", power.path)
    if power.collection:
        found += f" && size(object.{power.path}) > 0"
    if power.unless:
        found += f" && !({power.unless})"
    return found


def kept(power: PodPower) -> str:
    """CEL over `object` and a stored `oldObject`: the stored resource had the field with the same value."""
    return f"{_has('oldObject', power.path)} && oldObject.{power.path} == object.{power.path}"


def gained(power: PodPower) -> str:
    """CEL over `object` and `oldObject`: true when the request sets the field, or changes it."""
    return f"{present(power)} && !(oldObject != null && {kept(power)})"


def _literal(text: str) -> str:
    """`text` as a CEL string literal."""
    if "\\" in text:
        raise ValueError(f"keep backslashes out of a message: {text!r}")
    return "'" + text.replace("'", "\\'") + "'"


def message(power: PodPower) -> str:
    """CEL string expression: the field, what it gives, the rule, the user and the permission missing."""
    words = " or ".join(permission.words for permission in power.permissions)
    return (
        f"{_literal(power.path + ': ')} + {power.gives} + {_literal('; ' + power.why + '; ')} + "
        "request.userInfo.username + "
        f"{_literal(' may not (it needs ' + words + ' in namespace ')} + request.namespace + "
        f"{_literal('): ' + power.fix + ', or ask for ' + words + ' there')}"
    )


def policy_spec() -> dict[str, Any]:
    """The `spec` of the ValidatingAdmissionPolicy.

    One variable per permission (asked only when a validation needs it) and per power, one validation
    per power.
    """
    permissions = {permission.variable: permission for power in POWERS for permission in power.permissions}
    variables = [
        {"name": name, "expression": permission.expression} for name, permission in permissions.items()
    ]
    variables += [{"name": power.id, "expression": gained(power)} for power in POWERS]
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [GROUP],
                    "apiVersions": [VERSION],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [PLURAL],
                }
            ]
        },
        "variables": variables,
        "validations": [
            {
                "expression": f"!variables.{power.id} || "
                + " || ".join(f"variables.{permission.variable}" for permission in power.permissions),
                "messageExpression": message(power),
                "reason": "Forbidden",
            }
            for power in POWERS
        ],
    }


HEADER = "# Generated by `make generate` from tools/privilege_check.py; do not edit.\n"


def template() -> str:
    """`templates/privilege-check.yaml`: the policy and its binding behind `privilegeCheck.enabled`.

    Raises:
        ValueError: when the policy contains '{{', which helm would read as a template action.
    """
    policy = yaml.safe_dump({"spec": policy_spec()}, sort_keys=False, width=120)
    if "{{" in policy:
        raise ValueError("the privilege check contains '{{', which helm would read as a template action")
    policy = policy.replace(_DEFAULT_CLAIM, _DEFAULT_CLAIM_VALUE)
    return (
        f"{HEADER}{{{{- if .Values.privilegeCheck.enabled }}}}\n"
        "apiVersion: admissionregistration.k8s.io/v1\n"
        "kind: ValidatingAdmissionPolicy\n"
        f"metadata:\n  name: {NAME}\n{LABELS}"
        f"{policy}"
        "---\n"
        "apiVersion: admissionregistration.k8s.io/v1\n"
        "kind: ValidatingAdmissionPolicyBinding\n"
        f"metadata:\n  name: {NAME}\n{LABELS}"
        "spec:\n"
        f"  policyName: {NAME}\n"
        "  validationActions: [Deny]\n"
        "  {{- if .Values.watchNamespaces }}\n"
        "  matchResources:\n"
        "    namespaceSelector:\n"
        "      matchExpressions:\n"
        "        - key: kubernetes.io/metadata.name\n"
        "          operator: In\n"
        "          values:\n"
        "            {{- toYaml .Values.watchNamespaces | nindent 12 }}\n"
        "  {{- end }}\n"
        "{{- end }}\n"
    )
