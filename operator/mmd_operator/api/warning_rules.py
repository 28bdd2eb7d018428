"""Warnings before a GPU hour is lost: specs the API server admits that fail, or go wrong, only on a cluster.

One table, `RULES`, each rule a CEL expression over the MultimodalDeployment (`object`, as a
ValidatingAdmissionPolicy sees it) that is true when the resource walks into a trap, and a CEL message
naming the field, its values and the fix. From it come:

- `admission_policy_spec`, the ValidatingAdmissionPolicy the chart and the plain manifests install
  (`validationActions: [Warn, Audit]`), so `kubectl apply` prints the warnings;
- `spec_warnings`, the same rules evaluated offline with cel-python, for `mmctl validate` and for the
  operator's status note and Warning event on clusters without the policy.

Every rule guards each field with `has()`, so it holds whether or not the API server stored defaults.
A warning never refuses anything. Pure: imports celpy and the api models; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from mmd_operator.api.v1alpha1 import GROUP, PLURAL, VERSION
from mmd_operator.api.validation import cel_program, projection, read_paths, remembered

COMMIT_HASH_PATTERN = "^[0-9a-f]{40}$"
ACCESS_MODE_PATH = "spec.engineCache.accessMode"


@dataclass(frozen=True)
class WarningRule:
    """One trap: where it is (`path`), when a resource walks into it (`trap`) and what to say."""

    id: str
    """Stable name of the rule, for programs (`mmctl validate -o json`)."""
    path: str
    """The field path the warning is about, as `kubectl explain` spells it."""
    trap: str
    """CEL over `object`: true when the resource walks into the trap."""
    message: str
    """CEL string expression over `object`: what goes wrong, with the values, and the fix."""


@dataclass(frozen=True, order=True)
class SpecWarning:
    """A trap one resource walks into: the field path and the message, and the rule that found it."""

    path: str
    message: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class _Cel(str):
    """A CEL expression inside a message, as opposed to literal text."""


def _text(*parts: str) -> str:
    """A CEL string expression joining literal text and `_Cel` expressions."""
    pieces = []
    for part in parts:
        if isinstance(part, _Cel):
            pieces.append(f"string({part})")
        elif "'" in part or "\\" in part:
            raise ValueError(f"keep single quotes and backslashes out of message text: {part!r}")
        elif part:
            pieces.append(f"'{part}'")
    return " + ".join(pieces)


def _has(path: str) -> str:
    """CEL that is true when every step of `path` is present in `object`."""
    steps = path.split(".")
    return " && ".join(f"has(object.{'.'.join(steps[: i + 1])})" for i in range(len(steps)))


def _value(path: str) -> _Cel:
    return _Cel(f"object.{path}")


def _moving_tag(rule_id: str, path: str, consequence: str, *, when: str = "true") -> WarningRule:
    """The image at `path` names no tag, or `latest`, and no digest: `consequence` follows (if `when`)."""
    image = _value(path)
    return WarningRule(
        id=rule_id,
        path=path,
        trap=f"({when}) && {_has(path)} && !{image}.contains('@') && "
        f"({image}.endsWith(':latest') || !{image}.matches('^.*:[^/]*$'))",
        message=_text(
            'is "',
            image,
            f'", a moving tag (latest, or none): {consequence}; pin a version tag or a digest (@sha256:...)',
        ),
    )


_REUSE = "spec.serving.kvCacheReuse"
# The resource names the trtllm-serve runtime (the engine runtime's rules leave it out, and the reverse).
SERVE = "has(object.spec.runtime) && object.spec.runtime == 'trtllm-serve'"


def _unpinned_revision(source: str, what: str) -> WarningRule:
    """The Hugging Face source at `source` names a branch or tag (or nothing: main), not a commit."""
    hub = f"{source}.huggingface"
    path = f"{hub}.revision"
    revision = _Cel(f"({_has(path)} ? object.{path} : 'main')")
    return WarningRule(
        id=f"{what}-revision-not-a-commit",
        path=path,
        trap=f"!({SERVE}) && {_has(hub)} && !({_has(path)} && object.{path}.matches('{COMMIT_HASH_PATTERN}'))"
        if what == "model"
        else f"{_has(hub)} && !({_has(path)} && object.{path}.matches('{COMMIT_HASH_PATTERN}'))",
        message=_text(
            'is "',
            revision,
            '", not a 40-character commit hash: the cacheKey holds this name, not the commit, so when '
            "the repository moves upstream the engine is never rebuilt, and a build elsewhere (another "
            "namespace or engine cache) fetches other weights under the same key; pin the commit that "
            "git ls-remote https://huggingface.co/",
            _value(f"{hub}.repo"),
            " ",
            revision,
            " prints",
        ),
    )


def _unpinned_weights() -> WarningRule:
    """trtllm-serve: the weights' revision is a branch or tag, resolved once and then held."""
    hub = "spec.model.source.huggingface"
    path = f"{hub}.revision"
    revision = _Cel(f"({_has(path)} ? object.{path} : 'main')")
    return WarningRule(
        id="weights-revision-not-a-commit",
        path=path,
        trap=f"({SERVE}) && {_has(hub)} && !({_has(path)} && object.{path}.matches('{COMMIT_HASH_PATTERN}'))",
        message=_text(
            'is "',
            revision,
            '", not a 40-character commit hash: the first download resolves it to a commit and records it '
            "in the index of the engine cache, and every later resource naming this repository and revision "
            "is served that commit, so a newer upstream commit is never picked up, and a resource using "
            "another engine cache can get other weights; pin the commit (status.weights.commit shows the one "
            "recorded, git ls-remote https://huggingface.co/",
            _value(f"{hub}.repo"),
            " ",
            revision,
            " the current one)",
        ),
    )


_IMAGE_URLS = "spec.serving.imageUrlInput"
_POLICY = "spec.serving.networkPolicy"
_EGRESS = f"{_POLICY}.egress"
_OPEN_EGRESS = "e.cidr in ['0.0.0.0/0', '::/0'] && (!has(e.exceptCidrs) || size(e.exceptCidrs) == 0)"

RULES: tuple[WarningRule, ...] = (
    WarningRule(
        id="read-write-once-cache-with-replicas",
        path=ACCESS_MODE_PATH,
        trap=f"{_has(ACCESS_MODE_PATH)} && object.{ACCESS_MODE_PATH} == 'ReadWriteOnce' && "
        "has(object.spec.serving) && has(object.spec.serving.replicas) && object.spec.serving.replicas > 1",
        message=_text(
            "is ReadWriteOnce, which attaches the claim to one node at a time, and spec.serving.replicas is ",
            _value("spec.serving.replicas"),
            ": serving pods scheduled onto a second node never start (Multi-Attach error, stuck in "
            "ContainerCreating); use ReadWriteMany where the storage can share, or keep "
            "spec.serving.replicas at 1",
        ),
    ),
    WarningRule(
        id="read-write-once-cache-with-autoscaling",
        path=ACCESS_MODE_PATH,
        trap=f"{_has(ACCESS_MODE_PATH)} && object.{ACCESS_MODE_PATH} == 'ReadWriteOnce' && "
        f"{_has('spec.serving.autoscaling.maxReplicas')} && object.spec.serving.autoscaling.maxReplicas > 1",
        message=_text(
            "is ReadWriteOnce, which attaches the claim to one node at a time, and "
            "spec.serving.autoscaling.maxReplicas is ",
            _value("spec.serving.autoscaling.maxReplicas"),
            ": serving pods the autoscaler adds on a second node never start (Multi-Attach error, stuck in "
            "ContainerCreating) while the load that asked for them waits; use ReadWriteMany where the "
            "storage can share, or keep the serving pods on one node",
        ),
    ),
    WarningRule(
        id="read-write-once-pod-cache",
        path=ACCESS_MODE_PATH,
        trap=f"{_has(ACCESS_MODE_PATH)} && object.{ACCESS_MODE_PATH} == 'ReadWriteOncePod'",
        message=_text(
            "is ReadWriteOncePod, which lets one pod in the whole cluster use the claim at a time: a second "
            "serving replica, a build while the serving pod runs (any engine change) and another resource "
            "sharing the claim all stay Pending; use ReadWriteMany, or ReadWriteOnce where every pod runs "
            "on one node"
        ),
    ),
    _unpinned_revision("spec.model.source", "model"),
    _unpinned_revision("spec.model.lora.source", "lora"),
    _unpinned_weights(),
    WarningRule(
        id="kv-cache-reuse-needs-extra-ids",
        path=_REUSE,
        trap=f"!({SERVE}) && {_has(_REUSE)} && object.{_REUSE}",
        message=_text(
            "is true, so TensorRT-LLM refuses every request with an image that carries no "
            "prompt_table_extra_id (Input token extra ids must be provided when enabling kv cache reuse "
            "with prompt table), and two images with the same text would otherwise share cached blocks: "
            "every client must send prompt_table_extra_id, a uint64 of at least 1 naming the image (a "
            "digest of its bytes; mmctl infer sends one), or leave reuse off"
        ),
    ),
    WarningRule(
        id="serve-open-egress",
        path=_EGRESS,
        trap=f"({SERVE}) && {_has(_EGRESS)} && object.{_EGRESS}.exists(e, {_OPEN_EGRESS})",
        message=_text(
            "allows cidr ",
            _Cel(f"object.{_EGRESS}.filter(e, {_OPEN_EGRESS})[0].cidr"),
            " without exceptCidrs on runtime trtllm-serve, whose server fetches every http(s) image URL a "
            "client sends (and, at TensorRT-LLM 1.2, opens a bare path as a local file): it can reach the "
            "cloud metadata endpoint 169.254.169.254 and, on most network plugins, pods and Services; add "
            "exceptCidrs (169.254.169.254/32 and the pod and service networks) or list only the image hosts",
        ),
    ),
    WarningRule(
        id="image-urls-without-network-policy",
        path=_IMAGE_URLS,
        trap=f"{_has(_IMAGE_URLS)} && object.{_IMAGE_URLS} && !({_has(_POLICY)})",
        message=_text(
            "is true without spec.serving.networkPolicy, so the server fetches any URL a client sends from "
            "inside the cluster network, the cloud metadata endpoint 169.254.169.254 and cluster-internal "
            "Services included (server-side request forgery); add spec.serving.networkPolicy with an "
            "egress list of only the image hosts"
        ),
    ),
    WarningRule(
        id="image-urls-with-open-egress",
        path=_EGRESS,
        trap=f"{_has(_IMAGE_URLS)} && object.{_IMAGE_URLS} && {_has(_EGRESS)} && "
        f"object.{_EGRESS}.exists(e, {_OPEN_EGRESS})",
        message=_text(
            "allows cidr ",
            _Cel(f"object.{_EGRESS}.filter(e, {_OPEN_EGRESS})[0].cidr"),
            " without exceptCidrs while spec.serving.imageUrlInput is true: the server can still fetch "
            "from the cloud metadata endpoint 169.254.169.254 and, on most network plugins, from pods and "
            "Services; add exceptCidrs (169.254.169.254/32 and the pod and service networks) or list only "
            "the image hosts",
        ),
    ),
    _moving_tag(
        "builder-image-moving-tag",
        "spec.engine.builderImage",
        "the cacheKey holds the image by name, so a new image behind the tag never rebuilds the engine, "
        "and builds on other nodes can pull another TensorRT-LLM version",
    ),
    _moving_tag(
        "serving-image-moving-tag",
        "spec.serving.image",
        "a pod started after the tag moved can pull a TensorRT-LLM runtime other than the one the engine "
        "was built with, and the engine then fails to load",
        when=f"!({SERVE})",
    ),
    _moving_tag(
        "trtllm-serve-image-moving-tag",
        "spec.serving.image",
        "a pod started after the tag moved can run a TensorRT-LLM other than 1.2.1, whose command line and "
        "option names the generated --config follows, and trtllm-serve then refuses them or the model",
        when=SERVE,
    ),
    WarningRule(
        id="network-policy-without-clients",
        path=f"{_POLICY}.clients",
        trap=f"{_has(_POLICY)} && !({_has(f'{_POLICY}.clients')} && size(object.{_POLICY}.clients) > 0)",
        message=_text(
            "is empty, so no pod may send inference requests (ports ",
            _Cel(f"({SERVE}) ? '8000' : '8000 and 8001'"),
            "): where the network "
            "plugin enforces NetworkPolicy every request times out; list the client pods or namespaces "
            "(podSelector, namespaceSelector)",
        ),
    ),
)


def _with_path(rule: WarningRule) -> str:
    """The rule's message as `path: message`, the way `SpecWarning` prints it."""
    if rule.message.startswith("'"):
        return f"'{rule.path}: {rule.message[1:]}"
    return f"'{rule.path}: ' + {rule.message}"


def admission_policy_spec() -> dict[str, Any]:
    """The `spec` of the ValidatingAdmissionPolicy that warns of every rule at `kubectl apply`.

    `failurePolicy: Ignore`: a rule that cannot be evaluated warns of nothing rather than refusing.
    """
    return {
        "failurePolicy": "Ignore",
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
        "validations": [
            {"expression": f"!({rule.trap})", "messageExpression": _with_path(rule)} for rule in RULES
        ],
    }


def compile_rules() -> int:
    """Compile every warning rule's trap and message now (see `validation.compile_rules`)."""
    for rule in RULES:
        cel_program(rule.trap)
        cel_program(rule.message)
    return 2 * len(RULES)


def _warning(rule: WarningRule, activation: dict[str, Any]) -> SpecWarning | None:
    # As with the admission policy (failurePolicy Ignore), a rule that cannot be evaluated warns of
    # nothing; cel-python raises some evaluation errors and returns others.
    try:
        trapped = cel_program(rule.trap).evaluate(activation)
        if isinstance(trapped, CELEvalError) or not trapped:
            return None
        message = cel_program(rule.message).evaluate(activation)
    except CELEvalError:
        return None
    return None if isinstance(message, CELEvalError) else SpecWarning(rule.path, str(message), rule.id)


def _evaluate(resource: Mapping[str, Any], rules: tuple[WarningRule, ...] = RULES) -> list[SpecWarning]:
    converted: dict[str, Any] = {}

    def activation() -> dict[str, Any]:
        if "object" not in converted:  # only when some rule is not remembered
            converted["object"] = json_to_cel(dict(resource))
        return converted

    found = []
    for rule in rules:
        seen = projection(resource, read_paths("object", rule.trap, rule.message))

        def evaluate(rule: WarningRule = rule) -> SpecWarning | None:
            return _warning(rule, activation())

        warning = remembered(("warning", rule.id, rule.trap, rule.message, seen), evaluate)
        if warning is not None:
            found.append(warning)
    return found


def spec_warnings(spec: Mapping[str, Any], *, default_access_mode: str | None = None) -> list[SpecWarning]:
    """Every trap the `spec` mapping (camelCase, as stored or as written) walks into, in `RULES` order.

    `default_access_mode` is the operator's own engine-cache access mode, which the spec does not say
    when it leaves `engineCache.accessMode` out: its warnings are added, saying where the mode comes from.
    """
    found = _evaluate({"spec": spec})
    engine_cache = spec.get("engineCache")
    if default_access_mode is None or (isinstance(engine_cache, Mapping) and "accessMode" in engine_cache):
        return found
    cache = {**(engine_cache if isinstance(engine_cache, Mapping) else {}), "accessMode": default_access_mode}
    source = (
        f" ({ACCESS_MODE_PATH} is not set: {default_access_mode} is the operator's default, the chart "
        "value engineCache.accessMode)"
    )
    access_mode_rules = tuple(rule for rule in RULES if rule.path == ACCESS_MODE_PATH)
    for warning in _evaluate({"spec": {**spec, "engineCache": cache}}, access_mode_rules):
        found.append(SpecWarning(warning.path, warning.message + source, warning.rule))
    return found
