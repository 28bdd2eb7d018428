"""What the operator's client puts on the wire: the path under a server's own prefix, the query, the headers
and the body; refusals as ApiError; a proxy's way when the kubeconfig names one.

A plain HTTP server on 127.0.0.1 stands in for the API server (the cluster tests talk to the real one):
these cases need a server address with a path and a proxy, which the local control plane has not.
"""

from __future__ import annotations

import pytest

from mmd_operator.kube.client import ApiError
from tests.support.api_answerer import Server, make_client

CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}}


def test_requests_keep_the_servers_path_prefix_query_headers_and_body(server: Server) -> None:
    client = make_client(server.url + "/clusters/c-1/")
    try:
        assert client.apply(CONFIGMAP) == {"kind": "ConfigMap", "metadata": {"name": "answer"}}
        assert client.get("v1", "ConfigMap", "ns", "cm") is not None
    finally:
        client.close()
    applied, read = server.seen
    assert applied.method == "PATCH"
    assert (
        applied.path
        == "/clusters/c-1/api/v1/namespaces/ns/configmaps/cm?fieldManager=test-manager&force=true"
    )
    assert applied.headers["Content-Type"] == "application/apply-patch+yaml"
    assert applied.headers["Authorization"] == "Bearer sekret"
    assert applied.headers["User-Agent"] == "test-agent/1"
    assert applied.body == CONFIGMAP
    assert (read.method, read.path, read.body) == (
        "GET",
        "/clusters/c-1/api/v1/namespaces/ns/configmaps/cm",
        None,
    )


def test_a_refusal_is_an_api_error_with_the_status_reason_and_message(server: Server) -> None:
    server.answers["/configmaps/cm"] = (
        409,
        {"kind": "Status", "reason": "Conflict", "message": "the object has been modified"},
    )
    server.answers["/configmaps/gone"] = (404, {"kind": "Status", "reason": "NotFound", "message": "no"})
    client = make_client(server.url)
    try:
        with pytest.raises(ApiError) as refused:
            client.apply(CONFIGMAP)
        assert client.get("v1", "ConfigMap", "ns", "gone") is None
    finally:
        client.close()
    assert (refused.value.status, refused.value.reason) == (409, "Conflict")
    assert refused.value.conflict
    assert "the object has been modified" in str(refused.value)


def test_through_a_proxy_the_request_names_the_whole_address(server: Server) -> None:
    # The test server is the proxy too: a proxy is asked for the absolute address, path prefix and all.
    client = make_client("http://api.invalid:6443/prefix", proxy=server.url)
    try:
        client.get("v1", "ConfigMap", "ns", "cm")
    finally:
        client.close()
    (read,) = server.seen
    assert read.path == "http://api.invalid:6443/prefix/api/v1/namespaces/ns/configmaps/cm"
