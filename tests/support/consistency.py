"""The check the fault loops and the soak end with: is a namespace exactly what its resources want?

For every MultimodalDeployment: Ready for its generation; its Deployment, Service and repository ConfigMap
carry the digest of the manifest the operator's own pure code builds from the stored spec now (so a stale
or half-written child is found), and no other repository ConfigMap of it is left; its cacheKey is in the
engine index. For every object the operator labelled: every owner is a live resource, and a build Job's
owners are the resources whose current cacheKey it builds, at most one Job per cacheKey; a finished
build is in the index. `problems()` lists what is wrong (empty when all is well).

Also `JobLedger`, which watches build Jobs for a whole run and counts how many were ever created per
cacheKey. Test support: talks to the API server with the kubernetes client.
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from mmd_operator.api.v1alpha1 import GROUP, PLURAL, VERSION, MultimodalDeployment
from mmd_operator.config import OperatorConfig
from mmd_operator.desired.decision import manifests
from mmd_operator.kube.engine_index import EngineIndex
from mmd_operator.plan.resource_plan import plan_resource, plan_spec
from mmd_operator.status import previous_status, recorded_kind
from mmd_operator.vocabulary import hashing, labels, names

MANAGED = f"{labels.MANAGED_BY}={labels.OPERATOR}"
BUILDS = f"{labels.COMPONENT}={labels.ENGINE_BUILD}"


def _plain(api: k8s.ApiClient, obj: Any) -> dict[str, Any]:
    return obj if isinstance(obj, dict) else api.sanitize_for_serialization(obj)  # type: ignore[no-any-return]


def expected_children(body: Mapping[str, Any], config: OperatorConfig) -> dict[str, dict[str, Any]]:
    """The claim, Job, ConfigMap, Deployment and Service the operator's pure code wants for `body`, by kind.

    Planned as the operator plans: the operator's spec defaults filled in first, the engine for the kind
    of GPU the status records.
    """
    filled = config.with_spec_defaults(body["spec"])
    document = {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": {"name": "plan"}}
    _, plan = plan_resource({**document, "spec": filled})
    # For the kind of GPU the status says its engine is built for: the cacheKey and the pods name it.
    kind = recorded_kind(previous_status(body))
    if kind is not None:
        plan = plan_spec(plan.settings.spec, kind)
    resource = MultimodalDeployment(metadata=dict(body["metadata"]), spec=plan.settings.spec)
    return {manifest["kind"]: manifest for manifest in manifests(resource, plan, config=config)}


def problems(api: k8s.ApiClient, namespace: str, config: OperatorConfig | None = None) -> list[str]:
    """Everything in `namespace` that is not as its resources want (empty: consistent)."""
    config = config or OperatorConfig()
    core, apps, batch = k8s.CoreV1Api(api), k8s.AppsV1Api(api), k8s.BatchV1Api(api)
    custom = k8s.CustomObjectsApi(api)
    found: list[str] = []
    resources = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    live = {r["metadata"]["uid"]: r for r in resources}
    configmaps = [
        _plain(api, c) for c in core.list_namespaced_config_map(namespace, label_selector=MANAGED).items
    ]
    jobs = [_plain(api, j) for j in batch.list_namespaced_job(namespace, label_selector=BUILDS).items]
    deployments = {
        d.metadata.name: _plain(api, d)
        for d in apps.list_namespaced_deployment(namespace, label_selector=MANAGED).items
    }
    services = {
        s.metadata.name: _plain(api, s)
        for s in core.list_namespaced_service(namespace, label_selector=MANAGED).items
    }
    claim = config.engine_cache_claim  # the fault tests' resources name no claim of their own
    index_map = next((c for c in configmaps if c["metadata"]["name"] == names.engine_index(claim)), None)
    index = EngineIndex.from_configmap_data((index_map or {}).get("data"))
    wanted_keys: dict[str, set[str]] = defaultdict(set)  # cacheKey -> uids of resources that want it

    for body in resources:
        name, uid = body["metadata"]["name"], body["metadata"]["uid"]
        status = body.get("status") or {}
        if (
            status.get("observedGeneration") != body["metadata"]["generation"]
            or status.get("phase") != "Ready"
        ):
            ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
            found.append(
                f"{name}: {status.get('phase')} for generation {status.get('observedGeneration')}, "
                f"not Ready for {body['metadata']['generation']} "
                f"({ready.get('reason')}: {ready.get('message')})"
            )
            continue
        want = expected_children(body, config)
        key = want["Job"]["metadata"]["labels"][labels.CACHE_KEY]
        wanted_keys[key].add(uid)
        if (status.get("engine") or {}).get("cacheKey") != key:
            found.append(f"{name}: status.engine.cacheKey is not {key}")
        if index.get(key) is None:
            found.append(f"{name}: its cacheKey {key} is not in the engine index")
        for kind, have in (("Deployment", deployments.get(name)), ("Service", services.get(name))):
            if have is None:
                found.append(f"{name}: no {kind}")
            elif hashing.applied_hash(have) != hashing.applied_hash(want[kind]):
                found.append(f"{name}: its {kind} is not the one its spec wants")
        repositories = sorted(
            c["metadata"]["name"]
            for c in configmaps
            if (c["metadata"].get("labels") or {}).get(labels.INSTANCE) == name
            and (c["metadata"].get("labels") or {}).get(labels.COMPONENT) == labels.MODEL_REPOSITORY
        )
        if repositories != [want["ConfigMap"]["metadata"]["name"]]:
            wanted = want["ConfigMap"]["metadata"]["name"]
            found.append(f"{name}: repository ConfigMaps {repositories}, wanted {wanted}")

    owned = [
        *(("ConfigMap", c) for c in configmaps),
        *(("Job", j) for j in jobs),
        *(("Deployment", d) for d in deployments.values()),
        *(("Service", s) for s in services.values()),
    ]
    for kind, obj in owned:
        name = obj["metadata"]["name"]
        owners = [ref["uid"] for ref in obj["metadata"].get("ownerReferences") or []]
        if name == names.engine_index(claim):
            continue  # the index outlives its users by design: it describes the claim
        if not owners or any(uid not in live for uid in owners):
            found.append(f"{kind} {name}: owners {owners} are not all live resources (orphan)")
    keys_seen: dict[str, str] = {}
    for job in jobs:
        name = job["metadata"]["name"]
        key = job["metadata"]["labels"].get(labels.CACHE_KEY, "")
        if key in keys_seen:
            found.append(f"Jobs {keys_seen[key]} and {name} both build {key}")
        keys_seen[key] = name
        owners = {ref["uid"] for ref in job["metadata"].get("ownerReferences") or []}
        if owners != wanted_keys.get(key, set()):
            users = sorted(live[uid]["metadata"]["name"] for uid in wanted_keys.get(key, set()))
            holders = sorted(live[uid]["metadata"]["name"] for uid in owners if uid in live)
            found.append(f"Job {name}: owned by {holders}, but {users} want {key}")
        conditions = (job.get("status") or {}).get("conditions") or []
        complete = any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)
        if complete and index.get(key) is None:
            found.append(f"Job {name} completed but {key} is not in the engine index (lost entry)")
    return found


class JobLedger:
    """Watches a namespace's build Jobs and remembers every one ever created, per cacheKey.

    A watch can break (the API server restarts); it lists again and goes on, so a Job created and gone
    within such a gap would be missed, which a build of at least two seconds cannot be.
    """

    def __init__(self, api: k8s.ApiClient, namespace: str) -> None:
        self._batch = k8s.BatchV1Api(api)
        self._namespace = namespace
        self._uids: dict[str, set[str]] = defaultdict(set)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _note(self, job: Any) -> None:
        key = (job.metadata.labels or {}).get(labels.CACHE_KEY)
        if key:
            with self._lock:
                self._uids[key].add(job.metadata.uid)

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                listing = self._batch.list_namespaced_job(self._namespace, label_selector=BUILDS)
                for job in listing.items:
                    self._note(job)
                stream = k8s_watch.Watch().stream(
                    self._batch.list_namespaced_job,
                    self._namespace,
                    label_selector=BUILDS,
                    resource_version=listing.metadata.resource_version,
                    timeout_seconds=5,
                )
                # Closed here, not when collected: a watch left open holds its connection's socket.
                with contextlib.closing(stream):
                    for event in stream:
                        self._note(event["object"])
                        if self._stop.is_set():
                            break
            except Exception:  # the API server may be down for a while; look again
                self._stop.wait(0.5)

    def created(self) -> dict[str, int]:
        """How many Jobs were ever created per cacheKey."""
        with self._lock:
            return {key: len(uids) for key, uids in self._uids.items()}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
