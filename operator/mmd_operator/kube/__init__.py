"""Kubernetes adapter: the only operator code that talks to the API server (kubernetes client)."""
