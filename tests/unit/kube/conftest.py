"""The kube adapter's unit cases share the local stand-in for the API server."""

from tests.support.api_answerer import server

__all__ = ["server"]
