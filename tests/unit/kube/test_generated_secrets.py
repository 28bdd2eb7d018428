"""A group's SSH Secret is one plain create, asked for once per owner: AlreadyExists means it is there, and
nothing is sent again at rest (the create and the API server's answers are the cluster tier's:
tests/cluster/test_permissions.py, tests/cluster/test_multinode.py)."""

from __future__ import annotations

from mmd_operator.desired import groups
from mmd_operator.facts import OwnerRef
from mmd_operator.kube import cache as cached
from mmd_operator.kube.writes import WriteCount, Writer
from mmd_operator.vocabulary import names
from tests.support.api_answerer import Server, make_client

EXISTS = {"kind": "Status", "reason": "AlreadyExists", "code": 409}


def test_the_ssh_secret_is_created_once_per_owner_and_asked_for_again_once_forgotten(server: Server) -> None:
    writer = Writer(make_client(server.url), cached.Cache())
    shape = groups.ssh_secret("llava", "ml", OwnerRef(name="llava", uid="uid-1"))
    server.answers["/secrets"] = (201, {"kind": "Secret", "metadata": {"name": "llava-ssh"}})
    made, again = WriteCount(), WriteCount()
    writer.create_secret(shape, made)
    writer.create_secret(shape, again)
    (sent,) = server.seen
    assert (sent.method, sent.path.split("?")[0]) == ("POST", "/api/v1/namespaces/ml/secrets")
    assert sent.body["metadata"]["name"] == names.ssh_secret("llava")
    assert set(sent.body["data"]) == set(names.SSH_SECRET_FILES)
    assert (made.applied, again.applied) == (["Secret/llava-ssh"], [])
    # A new owner of the same name (the resource deleted and applied again): asked for; it is there.
    server.answers["/secrets"] = (409, EXISTS)
    renewed = groups.ssh_secret("llava", "ml", OwnerRef(name="llava", uid="uid-2"))
    found = WriteCount()
    writer.create_secret(renewed, found)
    assert len(server.seen) == 2 and found.applied == []
    writer.forget("ml", "llava")
    writer.create_secret(renewed, found)
    assert len(server.seen) == 3
