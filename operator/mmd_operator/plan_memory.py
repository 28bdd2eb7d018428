"""Plans memoised by spec, and which resources use which cacheKey and claim: one owner, one lock.

A plan (settings, limits, rendered repository, build and launch plans) is about 55 KiB and derived from
the spec and the kind of GPU its engine is built for; the spec's warnings (tens of milliseconds of CEL)
from the spec alone. Resources with the same spec and kind share them, held while some resource has that
spec: with specs changing all day, an LRU of plans held megabytes for specs nobody had any more (the
soak). What a resource's current plan uses (its cacheKey and engine-cache claim) routes the event of a
shared child (a build Job, a claim) to every resource it concerns; the controller asks `users_of_engine`
(a Job: its cacheKey in its claim), `users_of_cache_key` and `users_of_claim`. Safe to call from several
worker threads.

Imports the api's name rule and warning rules, the config, the planner and the digests; no I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mmd_operator.api import validation, warning_rules
from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.api.validation import InvalidSpecError, name_problem
from mmd_operator.api.warning_rules import spec_warnings
from mmd_operator.config import OperatorConfig
from mmd_operator.facts import GpuKind
from mmd_operator.plan import model_repository
from mmd_operator.plan.resource_plan import AnyPlan, plan_spec_document
from mmd_operator.vocabulary import hashing

Key = tuple[str, str]


@dataclass(frozen=True)
class Planned:
    """A valid spec's checked plan and its warnings (`path: message` each)."""

    plan: AnyPlan
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class Use:
    """What a resource's current plan uses."""

    cache_key: str
    claim: str


class PlanMemory:
    """The checked plan of each spec some resource has, and what each resource's plan uses."""

    def __init__(self, config: OperatorConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._plans: dict[str, Planned | InvalidSpecError] = {}
        self._holders: dict[str, set[Key]] = {}
        self._spec_of: dict[Key, str] = {}
        self._uses: dict[Key, Use] = {}
        # Who uses what, by (namespace, cacheKey) and (namespace, claim): every event of a build Job asks,
        # and a scan of every resource's use made N resources cost N^2.
        self._by_cache_key: dict[Key, set[str]] = {}
        self._by_claim: dict[Key, set[str]] = {}

    def plan(
        self, body: Mapping[str, Any], gpu_kind: GpuKind | None = None
    ) -> tuple[MultimodalDeployment, Planned] | InvalidSpecError:
        """The resource of `body` with its checked plan and warnings, or every problem of its spec.

        The plan's engine is built for `gpu_kind`; each kind of one spec is a plan of its own.
        """
        metadata = dict(body.get("metadata", {}))
        name_problems = name_problem(str(metadata.get("name", "")))
        if name_problems:
            return InvalidSpecError(name_problems)
        spec = body.get("spec")
        # The spec as stored, not as filled with the operator's defaults: the warnings speak of what the
        # user wrote. The settings are the same for every spec, so this identifies the plan as well.
        fingerprint = hashing.digest(spec if gpu_kind is None else {"spec": spec, "gpu": gpu_kind.describe()})
        key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        with self._lock:
            planned = self._plans.get(fingerprint)
        if planned is None:
            # Outside the lock: planning takes milliseconds, and other workers need not wait for it.
            planned = self._planned(spec, gpu_kind)
        with self._lock:
            if self._spec_of.get(key) != fingerprint:
                self._release(key)
                self._spec_of[key] = fingerprint
                self._holders.setdefault(fingerprint, set()).add(key)
            planned = self._plans.setdefault(fingerprint, planned)
        if isinstance(planned, InvalidSpecError):
            return planned
        return MultimodalDeployment(metadata=metadata, spec=planned.plan.spec), planned

    def _planned(self, spec: object, gpu_kind: GpuKind | None) -> Planned | InvalidSpecError:
        try:
            plan = plan_spec_document(self._config.with_spec_defaults(spec), gpu_kind)
        except InvalidSpecError as invalid:
            return invalid
        assert isinstance(spec, Mapping)  # planning refuses anything else
        warnings = spec_warnings(spec, default_access_mode=self._config.engine_cache_access_mode)
        return Planned(plan, tuple(str(warning) for warning in warnings))

    @staticmethod
    def compile() -> int:
        """Compile what planning uses (the CRD's CEL rules, the warning rules, the repository templates).

        Done at the operator's start, before the first reconcile; returns how many things were compiled.
        """
        return (
            validation.compile_rules() + warning_rules.compile_rules() + model_repository.compile_templates()
        )

    def record_use(self, key: Key, use: Use) -> bool:
        """Record what `key`'s plan uses; True when its cacheKey is new to it (first look at an engine)."""
        with self._lock:
            known = self._uses.get(key)
            self._uses[key] = use
            if known != use:
                self._unindex(key, known)
                namespace, name = key
                self._by_cache_key.setdefault((namespace, use.cache_key), set()).add(name)
                self._by_claim.setdefault((namespace, use.claim), set()).add(name)
        return known is None or known.cache_key != use.cache_key

    def users_of_cache_key(self, namespace: str, cache_key: str) -> list[str]:
        """Resources in `namespace` whose current plan has `cache_key`."""
        with self._lock:
            return sorted(self._by_cache_key.get((namespace, cache_key), ()))

    def users_of_engine(self, namespace: str, cache_key: str, claim: str) -> list[str]:
        """Resources in `namespace` whose current plan has `cache_key` in `claim`: one build Job's users."""
        with self._lock:
            by_key = self._by_cache_key.get((namespace, cache_key), set())
            by_claim = self._by_claim.get((namespace, claim), set())
            return sorted(by_key & by_claim)

    def users_of_claim(self, namespace: str, claim: str) -> list[str]:
        """Resources in `namespace` that build into and serve from `claim`."""
        with self._lock:
            return sorted(self._by_claim.get((namespace, claim), ()))

    def forget(self, key: Key) -> None:
        """`key` is gone: its plan goes with the last resource that had its spec."""
        with self._lock:
            self._release(key)
            self._unindex(key, self._uses.pop(key, None))

    def known(self) -> set[Key]:
        """Every resource with a plan or a use here."""
        with self._lock:
            return set(self._spec_of) | set(self._uses)

    @property
    def held(self) -> int:
        """How many distinct plans are held (one per spec some resource has)."""
        with self._lock:
            return len(self._plans)

    def _unindex(self, key: Key, use: Use | None) -> None:
        if use is None:
            return
        namespace, name = key
        for index, value in ((self._by_cache_key, use.cache_key), (self._by_claim, use.claim)):
            users = index.get((namespace, value))
            if users is not None:
                users.discard(name)
                if not users:
                    del index[(namespace, value)]

    def _release(self, key: Key) -> None:
        fingerprint = self._spec_of.pop(key, None)
        if fingerprint is None:
            return
        holders = self._holders[fingerprint]  # `plan` sets both together
        holders.discard(key)
        if not holders:
            del self._holders[fingerprint]
            self._plans.pop(fingerprint, None)
