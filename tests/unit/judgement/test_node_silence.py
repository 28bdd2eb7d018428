"""Silent nodes: a Lease not renewed on the operator's clock, the guards against a silence that is the
cluster's or the operator's own, and the serving pods marked on a silent node (the lost-node case on real
nodes is in `tests/pods/test_rollouts.py`)."""

from __future__ import annotations

from mmd_operator.facts import Meta, PodFacts, PodPhase
from mmd_operator.judgement.node_silence import Heard, heard, pods_to_mark, silent_nodes
from mmd_operator.vocabulary import labels

SERVING = tuple(sorted(labels.for_instance("llava", labels.SERVING).items()))


def pod(
    name: str, node: str, *, ready: bool = True, pod_labels: tuple[tuple[str, str], ...] = SERVING
) -> PodFacts:
    """A running pod of the operator's, serving unless its labels say otherwise."""
    return PodFacts(meta=Meta(name=name, labels=pod_labels), phase=PodPhase.RUNNING, ready=ready, node=node)


def test_a_node_counts_as_heard_when_its_renewal_changes_on_the_operators_clock() -> None:
    first = heard({}, {"a": "t1", "b": "t1"}, now=100.0)
    assert first == {"a": Heard("t1", 100.0), "b": Heard("t1", 100.0)}
    # The nodes' own times are only compared for a change, never with the operator's clock.
    later = heard(first, {"a": "t2", "b": "t1", "c": "t0"}, now=130.0)
    assert later == {"a": Heard("t2", 130.0), "b": Heard("t1", 100.0), "c": Heard("t0", 130.0)}
    assert heard(later, {"a": "t2"}, now=140.0) == {"a": Heard("t2", 130.0)}  # b and c are gone


def test_a_node_is_silent_after_the_set_time_while_the_others_are_heard() -> None:
    record = {"a": Heard("t", 100.0), "b": Heard("t", 118.0), "c": Heard("t", 119.0)}
    assert silent_nodes(record, now=119.0, after_seconds=20) == frozenset()
    assert silent_nodes(record, now=120.0, after_seconds=20) == {"a"}


def test_a_silence_of_half_the_cluster_or_more_is_nobodys_node() -> None:
    # Two nodes, one silent: a node lost, as on the local real nodes.
    assert silent_nodes({"a": Heard("t", 0.0), "b": Heard("t", 30.0)}, 30.0, 20) == {"a"}
    # Every node silent (the API server or the operator cut off), or more than half: nothing is marked.
    assert silent_nodes({"a": Heard("t", 0.0), "b": Heard("t", 0.0)}, 30.0, 20) == frozenset()
    assert silent_nodes({"a": Heard("t", 0.0)}, 30.0, 20) == frozenset()
    three = {"a": Heard("t", 0.0), "b": Heard("t", 0.0), "c": Heard("t", 30.0)}
    assert silent_nodes(three, 30.0, 20) == frozenset()


def test_only_the_operators_ready_serving_pods_on_a_silent_node_are_marked() -> None:
    build = tuple(sorted(labels.for_instance("llava", labels.ENGINE_BUILD).items()))
    foreign = (("app", "someone-elses"),)
    pods = [
        ("ns", pod("llava-1", "a")),
        ("ns", pod("llava-2", "b")),
        ("ns", pod("llava-3", "a", ready=False)),
        ("ns", pod("build-1", "a", pod_labels=build)),
        ("ns", pod("theirs", "a", pod_labels=foreign)),
    ]
    assert [(ns, p.meta.name) for ns, p in pods_to_mark(pods, frozenset({"a"}))] == [("ns", "llava-1")]


def test_a_resources_last_ready_pod_is_left_to_the_node_controller() -> None:
    whisper = tuple(sorted(labels.for_instance("whisper", labels.SERVING).items()))
    pods = [
        ("ns", pod("llava-1", "a")),
        ("ns", pod("llava-2", "b", ready=False)),  # starting: serves nothing yet
        ("other", pod("llava-9", "b")),  # the same name in another namespace is another resource
        ("ns", pod("whisper-1", "a", pod_labels=whisper)),
        ("ns", pod("whisper-2", "b", pod_labels=whisper)),
    ]
    assert [(ns, p.meta.name) for ns, p in pods_to_mark(pods, frozenset({"a"}))] == [("ns", "whisper-1")]


def test_a_groups_worker_is_marked_even_when_its_leader_no_longer_serves() -> None:
    """The Service selects leaders only: a worker's mark changes no serving, and says where its rank went.
    A leader is a pod the Service selects, and its resource's last ready one is left alone."""

    def member(name: str, node: str, worker: int, *, ready: bool = True) -> PodFacts:
        group = ((labels.GROUP_INDEX, "0"), (labels.WORKER_INDEX, str(worker)))
        return pod(name, node, ready=ready, pod_labels=tuple(sorted(SERVING + group)))

    world_ended = [
        ("ns", member("llava-group-0", "a", 0, ready=False)),
        ("ns", member("llava-group-0-1", "b", 1)),
    ]
    assert [p.meta.name for _, p in pods_to_mark(world_ended, frozenset({"b"}))] == ["llava-group-0-1"]
    leader_lost = [("ns", member("llava-group-0", "b", 0)), ("ns", member("llava-group-0-1", "a", 1))]
    assert pods_to_mark(leader_lost, frozenset({"b"})) == []


def test_a_stopping_worker_on_a_silent_node_is_marked_and_a_stopping_leader_is_not() -> None:
    """The group was recreated before the node fell silent long enough: the worker's deletion waits for the
    node, so its mark is what tells where the rank went. A stopping pod the Service selects has left it."""

    def stopping(name: str, worker: int) -> PodFacts:
        group = ((labels.GROUP_INDEX, "0"), (labels.WORKER_INDEX, str(worker)))
        meta = Meta(name=name, labels=tuple(sorted(SERVING + group)), deleting=True)
        return PodFacts(meta=meta, phase=PodPhase.RUNNING, ready=True, node="b")

    recreated = [("ns", stopping("llava-group-0", 0)), ("ns", stopping("llava-group-0-1", 1))]
    recreated.append(("ns", pod("llava-2", "a")))
    assert [p.meta.name for _, p in pods_to_mark(recreated, frozenset({"b"}))] == ["llava-group-0-1"]
