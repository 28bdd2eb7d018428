"""What the operator relies on of the API server, as cases run against the in-memory one and the real one.

Each case is one behaviour `tests.support.in_memory_api` claims, worded as the operator's client sees it.
`tests/unit/kube/test_in_memory_api.py` runs every case on the in-memory server (seconds) and
`tests/cluster/test_api_contract.py` on the local control plane's kube-apiserver and controller manager, so
the double cannot drift from the real thing: a behaviour the unit tier depends on that the real server
does not have fails the cluster tier. Only the fields a case names are compared; what the real server adds
(defaults, its controllers' status) is not the double's business. The garbage collector works a moment
after a delete on a cluster and at once in memory: `Subject.eventually` waits for the one and not the other.
Imports the operator's client and vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from mmd_operator.api.v1alpha1 import API_VERSION, KIND
from mmd_operator.desired import scaling
from mmd_operator.kube.client import ApiError, KubeClient, path
from mmd_operator.kube.object_facts import replicas_managers
from mmd_operator.vocabulary import kinds
from mmd_operator.vocabulary.kinds import ApiKind

T = TypeVar("T")
OPERATOR = "mmd-operator"
HANDOVER = "mmd-operator-handover"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llava.yaml"


@dataclass(frozen=True)
class Subject:
    """One API server as the cases use it, in a namespace of their own."""

    namespace: str
    # A client of the operator's kind under a field manager.
    client: Callable[[str], KubeClient]
    # Wait (on a cluster) for `check` to return something truthy, and return it; `what` names it on failure.
    eventually: Callable[[str, Callable[[], Any]], Any]
    # The (type, name) of the ConfigMap watch events after resourceVersion `since`, once `count` came.
    watch_configmaps: Callable[[str, int], list[tuple[str, str]]]


def _configmap(subject: Subject, name: str, data: dict[str, str], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": subject.namespace, **metadata},
        "data": data,
    }


def _reference(owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }


def _container() -> dict[str, Any]:
    """A container the `restricted` Pod Security level admits (the cluster tier's namespaces enforce it)."""
    return {
        "name": "main",
        "image": "registry.invalid/contract:1",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


def _deployment(subject: Subject, replicas: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "served"}},
        "template": {"metadata": {"labels": {"app": "served"}}, "spec": {"containers": [_container()]}},
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "served", "namespace": subject.namespace},
        "spec": spec,
    }


def _resource(subject: Subject) -> dict[str, Any]:
    document = yaml.safe_load(EXAMPLE.read_text())
    document["metadata"] = {"name": "llava", "namespace": subject.namespace}
    return document


def _refused(call: Callable[[], Any]) -> ApiError:
    try:
        call()
    except ApiError as error:
        return error
    raise AssertionError("the API server accepted what it should refuse")


def _version(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


# -- reads and versions ------------------------------------------------------------------------------


def an_object_that_does_not_exist_is_none_to_read_and_404_to_write(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    assert client.get("v1", "ConfigMap", subject.namespace, "absent") is None
    assert _refused(lambda: client.merge_patch("v1", "ConfigMap", subject.namespace, "absent", {})).not_found
    assert _refused(
        lambda: client.json_patch(
            "batch/v1", "Job", subject.namespace, "absent", [{"op": "add", "path": "/x"}]
        )
    ).not_found
    status = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "absent", "namespace": subject.namespace},
    }
    assert _refused(lambda: client.apply({**status, "status": {}}, subresource="status")).not_found
    assert client.delete("v1", "ConfigMap", subject.namespace, "absent") is False
    assert client.pod_log_tail(subject.namespace, "absent", lines=5, limit_bytes=1024) is None


def an_apply_creates_the_object_and_a_second_identical_one_changes_nothing(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    manifest = _configmap(subject, "settings", {"a": "1"}, labels={"app": "x"})
    created = client.apply(manifest)
    assert created["metadata"]["uid"] and created["data"] == {"a": "1"}
    assert created["metadata"]["labels"] == {"app": "x"}
    again = client.apply(manifest)
    assert _version(again) == _version(created), "an apply that changes nothing makes no new version"
    changed = client.apply({**manifest, "data": {"a": "2"}})
    assert _version(changed) > _version(created), "the operator's cache orders versions as numbers"
    read = client.get("v1", "ConfigMap", subject.namespace, "settings")
    assert read is not None and read["data"] == {"a": "2"} and _version(read) == _version(changed)


def lists_are_narrowed_by_an_equality_label_selector(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    client.apply(_configmap(subject, "one", {}, labels={"team": "a", "tier": "x"}))
    client.apply(_configmap(subject, "two", {}, labels={"team": "b", "tier": "x"}))
    named = [
        o["metadata"]["name"]
        for o in client.list("v1", "ConfigMap", subject.namespace, label_selector="team=a")
    ]
    assert named == ["one"]
    both = client.list("v1", "ConfigMap", subject.namespace, label_selector="tier=x,team=b")
    assert [o["metadata"]["name"] for o in both] == ["two"]
    assert both[0]["apiVersion"] == "v1" and both[0]["kind"] == "ConfigMap"


def discovery_tells_a_served_kind_from_one_nobody_installed(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    assert client.serves(kinds.CONFIGMAP) and client.serves(kinds.MULTIMODAL_DEPLOYMENT)
    assert not client.serves(ApiKind("nothing.mmd.dev/v1", "Nothing", "nothings"))


# -- server-side apply -------------------------------------------------------------------------------


def a_field_the_manager_no_longer_applies_is_removed(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    client.apply(_configmap(subject, "settings", {"a": "1", "b": "2"}, labels={"keep": "1", "drop": "1"}))
    live = client.apply(_configmap(subject, "settings", {"a": "1"}, labels={"keep": "1"}))
    assert live["data"] == {"a": "1"}
    assert (live["metadata"].get("labels") or {}) == {"keep": "1"}


def replicas_handed_over_stay_through_the_operators_apply_and_come_back_with_force(subject: Subject) -> None:
    operator = subject.client(OPERATOR)
    created = operator.apply(_deployment(subject, replicas=3))
    assert replicas_managers(created) == ((OPERATOR, "Apply"),)
    handover = scaling.replicas_handover(kinds.DEPLOYMENT, "served", subject.namespace, 3)
    operator.apply(handover, field_manager=HANDOVER)
    kept = operator.apply(_deployment(subject, replicas=None))
    assert kept["spec"]["replicas"] == 3, "the field another manager holds stays"
    assert replicas_managers(kept) == ((HANDOVER, "Apply"),)
    scaled = subject.client("autoscaler").merge_patch(
        "apps/v1", "Deployment", subject.namespace, "served", {"spec": {"replicas": 5}}
    )
    assert scaled["spec"]["replicas"] == 5 and replicas_managers(scaled) == (("autoscaler", "Update"),)
    taken = operator.apply(_deployment(subject, replicas=2))
    assert taken["spec"]["replicas"] == 2 and replicas_managers(taken) == ((OPERATOR, "Apply"),)


def owner_references_are_kept_per_uid_between_an_apply_and_patches(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    first = client.apply(_configmap(subject, "first-owner", {}))
    second = client.apply(_configmap(subject, "second-owner", {}))
    child = _configmap(subject, "shared", {"v": "1"}, ownerReferences=[_reference(first)])
    client.apply(child)
    add = {"op": "add", "path": "/metadata/ownerReferences/-", "value": _reference(second)}
    joined = client.json_patch("v1", "ConfigMap", subject.namespace, "shared", [add])
    assert [r["name"] for r in joined["metadata"]["ownerReferences"]] == ["first-owner", "second-owner"]
    reapplied = client.apply({**child, "data": {"v": "2"}})
    assert [r["name"] for r in reapplied["metadata"]["ownerReferences"]] == ["first-owner", "second-owner"], (
        "a reference another write added is not the apply's to remove"
    )


def the_status_changes_only_through_its_subresource_and_the_generation_only_with_the_spec(
    subject: Subject,
) -> None:
    client = subject.client(OPERATOR)
    resource = _resource(subject)
    created = client.apply({**resource, "status": {"phase": "Ready"}})
    assert "status" not in created or "phase" not in created["status"]
    assert created["metadata"]["generation"] == 1
    identity = {"apiVersion": API_VERSION, "kind": KIND, "metadata": resource["metadata"]}
    reported = client.apply(
        {**identity, "status": {"phase": "Pending", "observedGeneration": 1}}, subresource="status"
    )
    assert reported["status"]["phase"] == "Pending" and reported["metadata"]["generation"] == 1
    relabelled = client.apply({**resource, "metadata": {**resource["metadata"], "labels": {"a": "b"}}})
    assert relabelled["metadata"]["generation"] == 1 and relabelled["status"]["phase"] == "Pending"
    resource["spec"]["engine"]["maxBatchSize"] = 4
    respecified = client.apply({**resource, "metadata": {**resource["metadata"], "labels": {"a": "b"}}})
    assert respecified["metadata"]["generation"] == 2 and respecified["status"]["phase"] == "Pending"
    patched = client.merge_patch(
        API_VERSION, KIND, subject.namespace, "llava", {"status": {"phase": "Failed"}}
    )
    assert patched["status"]["phase"] == "Pending", "a write to the main resource leaves the status alone"


def a_deployments_generation_follows_its_spec_and_annotations(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    created = client.apply(_deployment(subject, replicas=1))
    assert created["metadata"]["generation"] == 1
    scaled = client.apply(_deployment(subject, replicas=2))
    assert scaled["metadata"]["generation"] == 2
    annotated = _deployment(subject, replicas=2)
    annotated["metadata"]["annotations"] = {"serving.multimodal.dev/applied-hash": "abc"}
    assert client.apply(annotated)["metadata"]["generation"] == 3
    annotated["metadata"]["labels"] = {"a": "b"}
    assert client.apply(annotated)["metadata"]["generation"] == 3


# -- patches, creation, deletion ---------------------------------------------------------------------


def a_json_patch_appends_to_a_list_and_is_refused_422_where_the_list_is_missing(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    owner = client.apply(_configmap(subject, "owner", {}))
    client.apply(_configmap(subject, "bare", {}))
    add = {"op": "add", "path": "/metadata/ownerReferences/-", "value": _reference(owner)}
    assert (
        _refused(lambda: client.json_patch("v1", "ConfigMap", subject.namespace, "bare", [add])).status == 422
    )


def a_merge_patch_computed_from_a_stale_version_is_refused_409(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    first = client.apply(_configmap(subject, "settings", {"a": "1"}))
    client.apply(_configmap(subject, "settings", {"a": "2"}))
    stale = {"metadata": {"resourceVersion": first["metadata"]["resourceVersion"]}, "data": {"a": "3"}}
    assert _refused(
        lambda: client.merge_patch("v1", "ConfigMap", subject.namespace, "settings", stale)
    ).conflict
    current = client.get("v1", "ConfigMap", subject.namespace, "settings")
    assert current is not None and current["data"] == {"a": "2"}
    fresh = {
        "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
        "data": {"a": None, "b": "3"},
    }
    assert client.merge_patch("v1", "ConfigMap", subject.namespace, "settings", fresh)["data"] == {"b": "3"}


def a_post_of_a_name_that_exists_is_refused_409(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    body = _configmap(subject, "index", {"k": "v"})
    created = client.request("POST", path("v1", "ConfigMap", subject.namespace), body=body)
    assert created["data"] == {"k": "v"}
    assert _refused(
        lambda: client.request("POST", path("v1", "ConfigMap", subject.namespace), body=body)
    ).conflict


def a_jobs_template_cannot_change_but_its_metadata_can(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "build", "namespace": subject.namespace},
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [_container()]}},
        },
    }
    client.apply(job)
    job["metadata"]["labels"] = {"a": "b"}
    assert client.apply(job)["metadata"]["labels"]["a"] == "b"
    job["spec"]["template"]["spec"]["containers"][0]["args"] = ["other"]
    assert _refused(lambda: client.apply(job)).status == 422


def a_delete_with_another_uid_is_refused_409(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    live = client.apply(_configmap(subject, "settings", {}))
    assert _refused(
        lambda: client.delete("v1", "ConfigMap", subject.namespace, "settings", uid="not-its-uid")
    ).conflict
    assert (
        client.delete("v1", "ConfigMap", subject.namespace, "settings", uid=live["metadata"]["uid"]) is True
    )
    assert client.get("v1", "ConfigMap", subject.namespace, "settings") is None


def deleting_an_owner_collects_what_it_alone_owned_and_unlinks_it_from_the_rest(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    first = client.apply(_configmap(subject, "first-owner", {}))
    second = client.apply(_configmap(subject, "second-owner", {}))
    client.apply(_configmap(subject, "only-first", {}, ownerReferences=[_reference(first)]))
    client.apply(_configmap(subject, "both", {}, ownerReferences=[_reference(first), _reference(second)]))
    client.delete("v1", "ConfigMap", subject.namespace, "first-owner")

    def collected() -> bool:
        return client.get("v1", "ConfigMap", subject.namespace, "only-first") is None

    subject.eventually("the dependent of the deleted owner alone to be deleted", collected)

    def unlinked() -> dict[str, Any] | None:
        both = client.get("v1", "ConfigMap", subject.namespace, "both")
        assert both is not None, "a dependent with another owner stays"
        return both if len(both["metadata"].get("ownerReferences") or []) == 1 else None

    both = subject.eventually("the deleted owner's reference to be removed", unlinked)
    assert both["metadata"]["ownerReferences"][0]["name"] == "second-owner"


def an_object_whose_only_owner_never_existed_is_collected(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    ghost = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "ghost",
        "uid": "00000000-0000-0000-0000-000000000001",
    }
    client.apply(_configmap(subject, "orphan", {}, ownerReferences=[ghost]))
    subject.eventually(
        "the orphan to be collected",
        lambda: client.get("v1", "ConfigMap", subject.namespace, "orphan") is None,
    )


# -- events and watches ------------------------------------------------------------------------------


def an_event_is_posted_about_a_resource(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    resource = client.apply(_resource(subject))
    client.post_event(resource, type="Normal", reason="Contract", message="said once", component=OPERATOR)
    events = client.list("v1", "Event", subject.namespace)
    said = [e for e in events if e.get("reason") == "Contract"]
    assert len(said) == 1 and said[0]["involvedObject"]["uid"] == resource["metadata"]["uid"]
    assert said[0]["message"] == "said once" and said[0]["type"] == "Normal"


def a_watch_sees_each_change_once_and_nothing_of_a_write_that_changed_nothing(subject: Subject) -> None:
    client = subject.client(OPERATOR)
    since = client.request("GET", path("v1", "ConfigMap", subject.namespace))["metadata"]["resourceVersion"]
    client.apply(_configmap(subject, "watched", {"a": "1"}))
    client.apply(_configmap(subject, "watched", {"a": "1"}))
    client.apply(_configmap(subject, "watched", {"a": "2"}))
    client.delete("v1", "ConfigMap", subject.namespace, "watched")
    seen = [event for event in subject.watch_configmaps(since, 3) if event[1] == "watched"]
    assert seen == [("ADDED", "watched"), ("MODIFIED", "watched"), ("DELETED", "watched")]


CASES: tuple[Callable[[Subject], None], ...] = (
    an_object_that_does_not_exist_is_none_to_read_and_404_to_write,
    an_apply_creates_the_object_and_a_second_identical_one_changes_nothing,
    lists_are_narrowed_by_an_equality_label_selector,
    discovery_tells_a_served_kind_from_one_nobody_installed,
    a_field_the_manager_no_longer_applies_is_removed,
    replicas_handed_over_stay_through_the_operators_apply_and_come_back_with_force,
    owner_references_are_kept_per_uid_between_an_apply_and_patches,
    the_status_changes_only_through_its_subresource_and_the_generation_only_with_the_spec,
    a_deployments_generation_follows_its_spec_and_annotations,
    a_json_patch_appends_to_a_list_and_is_refused_422_where_the_list_is_missing,
    a_merge_patch_computed_from_a_stale_version_is_refused_409,
    a_post_of_a_name_that_exists_is_refused_409,
    a_jobs_template_cannot_change_but_its_metadata_can,
    a_delete_with_another_uid_is_refused_409,
    deleting_an_owner_collects_what_it_alone_owned_and_unlinks_it_from_the_rest,
    an_object_whose_only_owner_never_existed_is_collected,
    an_event_is_posted_about_a_resource,
    a_watch_sees_each_change_once_and_nothing_of_a_write_that_changed_nothing,
)
