"""What the cluster and pods tiers share: API handles with a poller, kubectl and helm, resources as a user
applies them, the `restricted` Pod Security level and the CRD.

Imports the kubernetes client, pytest, our CRD generator and pod settings, and the local cluster (its
token kubeconfigs).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from mmd_operator.api import crdgen
from mmd_operator.desired import pods
from mmd_testbed.localcluster.cluster import LocalCluster

# What the cluster tier's namespaces enforce (pods that break it are refused at creation).
POD_SECURITY = {"pod-security.kubernetes.io/enforce": "restricted"}


def restricted(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """`pod_spec` with the settings the `restricted` level requires (the operator's own, for its pods)."""
    containers = [{**c, "securityContext": pods.container_security_context()} for c in pod_spec["containers"]]
    return {**pod_spec, "securityContext": pods.pod_security_context(), "containers": containers}


@dataclass
class Kube:
    """Typed-enough handles on the API groups the tests use, plus helpers."""

    core: Any
    apps: Any
    batch: Any
    storage: Any

    @classmethod
    def of(cls, api_client: Any) -> Kube:
        """The handles on `api_client` (a kubernetes.client.ApiClient)."""
        return cls(
            core=k8s.CoreV1Api(api_client),
            apps=k8s.AppsV1Api(api_client),
            batch=k8s.BatchV1Api(api_client),
            storage=k8s.StorageV1Api(api_client),
        )

    def wait_for(
        self,
        what: str,
        check: Callable[[], Any],
        timeout: float = 60.0,
        interval: float = 0.3,
        explain: Callable[[], str] | None = None,
    ) -> Any:
        """Poll `check` until it returns something truthy; on timeout, fail naming `what` and `explain()`."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                result = check()
            except ApiException as error:
                last_error = error
                result = None
            if result:
                return result
            time.sleep(interval)
        context = f"\n{explain()}" if explain else ""
        pytest.fail(
            f"timed out after {timeout:.0f} s waiting for {what} (last API error: {last_error}){context}"
        )

    def events_about(
        self, namespace: str, name: str, reason: str, *, containing: str = "", timeout: float = 30.0
    ) -> list[Any]:
        """The Events of `reason` about object `name` whose message holds `containing`, once there is one.

        The operator posts its Events from a thread of its own after the status write they go with, so a
        test that has just seen that status waits for them rather than reading once.
        """
        selector = f"involvedObject.name={name},reason={reason}"

        def found() -> list[Any]:
            events = self.core.list_namespaced_event(namespace, field_selector=selector).items
            return [event for event in events if containing in (event.message or "")]

        return self.wait_for(  # type: ignore[no-any-return]
            f"a {reason} event about {name}" + (f" saying {containing!r}" if containing else ""),
            found,
            timeout=timeout,
            explain=lambda: self.describe_namespace(namespace),
        )

    def describe_namespace(self, namespace: str) -> str:
        """Pods with their container states and the latest events of `namespace`: why a wait failed."""
        lines = [f"pods in {namespace}:"]
        for pod in self.core.list_namespaced_pod(namespace).items:
            states = [
                f"{s.name} ready={s.ready} restarts={s.restart_count} {_state(s.state)}"
                for s in (pod.status.container_statuses or [])
            ]
            lines.append(f"  {pod.metadata.name} {pod.status.phase} node={pod.spec.node_name} {states}")
        events = sorted(
            self.core.list_namespaced_event(namespace).items,
            key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.creation_timestamp),
        )
        lines.append(f"last events in {namespace}:")
        lines += [
            f"  {e.type} {e.reason} {e.involved_object.kind}/{e.involved_object.name}: {e.message}"
            for e in events[-25:]
        ]
        return "\n".join(lines)


def _state(state: Any) -> str:
    for kind in ("waiting", "running", "terminated"):
        detail = getattr(state, kind, None) if state else None
        if detail:
            reason = getattr(detail, "reason", None) or ""
            code = getattr(detail, "exit_code", None)
            return f"{kind}({reason}{'' if code is None else f' exit {code}'})"
    return "unknown"


@dataclass(frozen=True)
class Tools:
    """kubectl and helm from the binary cache, pointed at the session cluster."""

    bin_dir: Path
    env: dict[str, str]

    @classmethod
    def for_cluster(cls, bin_dir: Path, kubeconfig: Path, home: Path) -> Tools:
        """kubectl and helm in `bin_dir`, on `kubeconfig`, with a HOME (and helm's cache) of their own."""
        env = {
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "KUBECONFIG": str(kubeconfig),
            "HOME": str(home),
            # helm keeps its cache, config and data under these; keep them out of the real home.
            "HELM_CACHE_HOME": str(home / "helm-cache"),
            "HELM_CONFIG_HOME": str(home / "helm-config"),
            "HELM_DATA_HOME": str(home / "helm-data"),
        }
        return cls(bin_dir=bin_dir, env=env)

    def run(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.bin_dir / args[0]), *args[1:]],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            pytest.fail(f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result


@dataclass
class Resources:
    """MultimodalDeployments of one namespace, as a test applies and watches them."""

    kube: Kube
    custom: Any
    namespace: str

    def apply(self, document: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply `document` as a user would (field manager `kubectl`)."""
        document = {**document, "metadata": {**document["metadata"], "namespace": self.namespace}}
        result: dict[str, Any] = self.custom.patch_namespaced_custom_object(
            "serving.multimodal.dev",
            "v1alpha1",
            self.namespace,
            "multimodaldeployments",
            document["metadata"]["name"],
            document,
            field_manager="kubectl",
            force=True,
            _content_type="application/apply-patch+yaml",
        )
        return result

    def get(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.get_namespaced_custom_object(
            "serving.multimodal.dev", "v1alpha1", self.namespace, "multimodaldeployments", name
        )
        return result

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            "serving.multimodal.dev", "v1alpha1", self.namespace, "multimodaldeployments", name
        )

    def condition(self, name: str, kind: str) -> dict[str, Any]:
        conditions = self.get(name).get("status", {}).get("conditions", [])
        return next((c for c in conditions if c["type"] == kind), {})

    def wait_phase(
        self,
        name: str,
        phase: str,
        timeout: float = 60.0,
        *,
        status_also: Callable[[dict[str, Any]], bool] = lambda _: True,
    ) -> dict[str, Any]:
        """Wait until the resource reports `phase` for its current generation (and `status_also` holds
        for its status)."""

        def reached() -> dict[str, Any] | None:
            body = self.get(name)
            status = body.get("status") or {}
            current = status.get("observedGeneration") == body["metadata"]["generation"]
            return body if current and status.get("phase") == phase and status_also(status) else None

        def explain() -> str:
            status = self.get(name).get("status") or {}
            conditions = [
                f"  {c['type']}={c['status']} {c.get('reason')}: {c.get('message')}"
                for c in status.get("conditions", [])
            ]
            return "\n".join(
                [
                    f"{name} is {status.get('phase')}:",
                    *conditions,
                    self.kube.describe_namespace(self.namespace),
                ]
            )

        found: dict[str, Any] = self.kube.wait_for(
            f"{name} to be {phase}", reached, timeout=timeout, explain=explain
        )
        return found


def read_or_none(read: Callable[[str, str], Any], name: str, namespace: str) -> dict[str, Any] | None:
    """`read(name, namespace)` (a client's read_namespaced_*) as plain JSON, or None when there is none."""
    try:
        found = read(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    result: dict[str, Any] = k8s.ApiClient().sanitize_for_serialization(found)
    return result


def unprivileged_kubeconfig(
    kube: Kube, tools: Tools, cluster: LocalCluster, namespace: str, name: str, directory: Path
) -> Path:
    """A kubeconfig of a new ServiceAccount `name` in `namespace`, bound to no role: it may read nothing."""
    kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    token = tools.run("kubectl", "create", "token", name, "-n", namespace).stdout.strip()
    return cluster.token_kubeconfig(token, directory / f"{name}.kubeconfig")


def new_namespace(kube: Kube, stem: str) -> str:
    """A fresh namespace enforcing Pod Security `restricted`, with its default ServiceAccount."""
    stem = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    labels = {"mmd.test/session": "pods", **POD_SECURITY}
    kube.core.create_namespace({"metadata": {"name": name, "labels": labels}})
    kube.wait_for(
        f"serviceaccount default in {name}",
        lambda: kube.core.read_namespaced_service_account("default", name),
        timeout=60,
    )
    return name


def install_crd(api_client: k8s.ApiClient) -> None:
    """The generated CRD, installed (or replaced) and Established."""
    extensions = k8s.ApiextensionsV1Api(api_client)
    body = crdgen.crd()
    name = body["metadata"]["name"]
    try:
        extensions.create_custom_resource_definition(body)
    except ApiException as error:
        if error.status != 409:
            raise
        current = extensions.read_custom_resource_definition(name)
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        extensions.replace_custom_resource_definition(name, body)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        conditions = extensions.read_custom_resource_definition(name).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        time.sleep(0.3)
    pytest.fail("the CRD never became Established")


def printed_rows(listing: str) -> list[dict[str, str]]:
    """The rows of a `kubectl get` table by column, read at the header's offsets: an empty cell (a
    printer column whose field is unset, PROGRESS at rest) stays empty rather than shifting the rest."""
    header, *rows = listing.splitlines()
    starts = [match.start() for match in re.finditer(r"\S+", header)]
    names = header.split()
    ends = [*starts[1:], None]
    return [
        {name: row[start:end].strip() for name, start, end in zip(names, starts, ends, strict=True)}
        for row in rows
    ]
