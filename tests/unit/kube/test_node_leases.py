"""The silent-node adapter: it lists the node Leases and marks the serving pods of a silent node, against
a local stand-in for the API server, which (unlike the local cluster) can keep one node silent while the
others renew; the lost-node case on real nodes is in `tests/pods/test_rollouts.py`."""

from __future__ import annotations

from mmd_operator.judgement import node_silence
from mmd_operator.kube.node_leases import NAMESPACE, NodeSilence
from tests.support.api_answerer import Server, make_client
from tests.unit.judgement.test_node_silence import pod


def test_the_adapter_lists_the_leases_and_marks_the_pods_of_a_silent_node(server: Server) -> None:
    """Node a stops renewing, b renews every look: after 20 s on the operator's clock a's serving pod
    gets Ready False by a strategic-merge patch of its status; nothing before that, nor while the
    listing is refused."""
    renewal = {"b": 0}
    clock_now = [0.0]

    def leases() -> dict[str, object]:
        renewal["b"] += 1
        items = [
            {"metadata": {"name": "a"}, "spec": {"renewTime": "2026-11-28T00:00:00.000000Z"}},
            {"metadata": {"name": "b"}, "spec": {"renewTime": f"2026-11-28T00:00:{renewal['b']:02d}Z"}},
        ]
        return {"kind": "LeaseList", "items": items}

    listing = f"/namespaces/{NAMESPACE}/leases"
    client = make_client(server.url)
    silence = NodeSilence(client, 20.0, clock=lambda: clock_now[0])
    assert silence.interval == 4.0
    try:
        pods = [("ns", pod("llava-1", "a")), ("ns", pod("llava-2", "b"))]
        for now in (0.0, 10.0, 19.0):
            clock_now[0] = now
            server.answers[listing] = (200, leases())
            assert silence.silent() == frozenset(), now
        assert silence.mark(pods, frozenset()) == []
        clock_now[0] = 20.0
        server.answers[listing] = (200, leases())
        silent = silence.silent()
        assert silent == {"a"}
        assert silence.mark(pods, silent) == ["ns/llava-1"]
        clock_now[0] = 24.0
        server.answers[listing] = (403, {"kind": "Status", "reason": "Forbidden", "message": "no"})
        assert silence.silent() == frozenset()  # and it does not ask again for a while
        asked = len(server.seen)
        clock_now[0] = 28.0
        assert silence.silent() == frozenset() and len(server.seen) == asked
    finally:
        client.close()
    (patch,) = [seen for seen in server.seen if seen.method == "PATCH"]
    assert patch.path.split("?")[0] == "/api/v1/namespaces/ns/pods/llava-1/status"
    assert patch.headers["Content-Type"] == "application/strategic-merge-patch+json"
    (condition,) = patch.body["status"]["conditions"]
    assert (condition["type"], condition["status"]) == ("Ready", "False")
    assert condition["reason"] == node_silence.REASON
    assert condition["message"].startswith("node a has not renewed its Lease for 20 s")
