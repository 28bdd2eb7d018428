"""A missing token Secret or key, as the kubelet reports it of the Job's pod, is SecretNotFound or
SecretKeyNotFound with its fix; the operator reads no Secret.

The pods are what the API server holds once the kubelet has written their status (`tests.support.kubelet`:
its words from its sources); `tests/pods/test_token_secret.py` has a real kubelet write them, and
`tests/unit/kube/test_kubelet_refusals.py` reads them as the operator does.
"""

from __future__ import annotations

import pytest

from mmd_operator.api.v1alpha1 import SecretKeyRef
from mmd_operator.facts import JobFacts, Meta, Missing, PodPhase
from mmd_operator.judgement import token_secret
from mmd_operator.kube import object_facts
from tests.support import kubelet
from tests.unit.desired.test_decision import condition, decide, example, status_of

TOKEN = SecretKeyRef(name="huggingface", key="token")
NAMESPACE = "ml"
NOT_FOUND = "Secret huggingface not found in namespace ml"
NO_KEY = "Secret huggingface has no key token"


ENV_MISSING = kubelet.pod(
    "build-abc-x7",
    NAMESPACE,
    kubelet.config_error_status(["builder"], kubelet.secret_not_found("huggingface")),
)
MOUNTING = kubelet.pod("download-abc-x7", NAMESPACE, kubelet.creating_status(["weights-download"]))
RUNNING = kubelet.pod(
    "build-abc-x7",
    NAMESPACE,
    {"phase": "Running", "containerStatuses": [{"name": "builder", "image": "b", "state": {"running": {}}}]},
)


def test_the_kubelets_waiting_words_are_kept_of_a_pod() -> None:
    facts = object_facts.pod(ENV_MISSING)
    assert facts.phase is PodPhase.PENDING and facts.node == "gpu-node-1"
    assert facts.waiting == (("CreateContainerConfigError", 'secret "huggingface" not found'),)
    assert object_facts.pod(MOUNTING).waiting == (("ContainerCreating", ""),)
    assert object_facts.pod(RUNNING).waiting == ()


@pytest.mark.parametrize(
    ("said", "kind", "message"),
    [
        (kubelet.secret_not_found("huggingface"), Missing.SECRET, NOT_FOUND),
        (kubelet.env_key_not_found("token", "ml", "huggingface"), Missing.SECRET_KEY, NO_KEY),
        (
            kubelet.failed_mount("hub-token", kubelet.secret_not_found("huggingface")),
            Missing.SECRET,
            NOT_FOUND,
        ),
        (
            kubelet.failed_mount("hub-token", kubelet.volume_key_not_found("token")),
            Missing.SECRET_KEY,
            NO_KEY,
        ),
    ],
)  # fmt: skip
def test_each_of_the_kubelets_refusals_names_the_field_the_secret_and_the_fix(
    said: str, kind: Missing, message: str
) -> None:
    found = token_secret.refusal(TOKEN, NAMESPACE, "build-abc-x7", [said])
    assert found is not None and found.kind is kind
    assert found.field == "spec.model.source.huggingface.tokenSecretRef"
    assert (
        found.message == f"{message}; pod build-abc-x7 waits for it (the kubelet starts it once it is there)"
    )
    if kind is Missing.SECRET:
        assert found.fix == (
            "create it with kubectl create secret generic huggingface -n ml "
            "--from-literal=token=<your Hugging Face token>"
        )
    else:
        assert found.fix.endswith("spec.model.source.huggingface.tokenSecretRef.key")


def test_words_about_another_secret_or_key_are_not_the_token_secrets() -> None:
    others = [
        kubelet.secret_not_found("registry"),
        kubelet.env_key_not_found("other", NAMESPACE, "huggingface"),
        kubelet.env_key_not_found("token", NAMESPACE, "huggingface-2"),
        kubelet.failed_mount("cache", kubelet.volume_key_not_found("token-2")),
        'configmap "settings" not found',
        "",
    ]
    assert token_secret.refusal(TOKEN, NAMESPACE, "p", others) is None


def test_a_missing_secret_holds_the_build_pod_and_the_status_says_what_to_do() -> None:
    resource, plan = example("mllama")
    pod = object_facts.pod(ENV_MISSING)
    job = JobFacts(meta=Meta(name=pod.meta.name.rsplit("-", 1)[0]))
    refused = token_secret.refusal(TOKEN, NAMESPACE, pod.meta.name, [message for _, message in pod.waiting])
    assert refused is not None
    decision = decide(resource, plan, job=job, job_pods=(pod,), missing=(refused,))
    # The Job stays (its pod starts once the Secret is there); nothing serves yet.
    assert decision.delete == () and "Deployment" not in [m["kind"] for m in decision.apply]
    status = status_of(decision)
    ready = condition(status, "Ready")
    assert (status.phase.value, ready.reason) == ("Failed", "SecretNotFound")
    assert ready.message == (
        "spec.model.source.huggingface.tokenSecretRef: Secret huggingface not found in namespace ml; pod "
        "build-abc-x7 waits for it (the kubelet starts it once it is there): create it with kubectl create "
        "secret generic huggingface -n ml --from-literal=token=<your Hugging Face token>."
    )
    assert condition(status, "EngineReady").reason == "SecretNotFound"
