"""Which of the namespace's ResourceQuotas refuses a pod the operator asked for, and by how much.

The API server's quota admission refuses a pod when, for some resource a quota that counts the pod
names, what is used plus what the pod asks is more than the quota allows (`hard`). The Job controller and
the ReplicaSet controller try again and again, and meanwhile a Job has no pod and a Deployment fewer than
it wants; the Job says so only in an Event, the Deployment in its ReplicaFailure condition. `refusal`
does admission's sum with the quota's own figures and what the pod asks (`PodAsk`, from the plan's pod
resources), so the status names the quota, the resource, the three figures and the field that sets the
pod's side. Scopes are honoured: the operator's pods have requests (NotBestEffort) and no deadline of
their own (NotTerminating); a PriorityClass selector is matched against the pod's class. Pure: imports
the api models and quantities, the facts and the plan's pod resources.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from mmd_operator.api import quantities
from mmd_operator.api.v1alpha1 import GPU_RESOURCE, MultimodalDeploymentSpec
from mmd_operator.facts import Observed, QuotaFacts
from mmd_operator.plan.pod_resources import PlannedResources, PodResources
from mmd_operator.vocabulary import labels

QUOTA_EXCEEDED = "QuotaExceeded"
# Resources quota admission counts a pod's request of under their bare name too.
_BARE = ("cpu", "memory", "ephemeral-storage")
# Scopes the operator's pods fall in, and those they never do.
_IN_SCOPES = frozenset({"NotBestEffort", "NotTerminating"})
_OUT_OF_SCOPES = frozenset({"BestEffort", "Terminating", "CrossNamespacePodAffinity"})


@dataclass(frozen=True)
class PodAsk:
    """What one pod counts against a quota, by the quota's resource names, and who it is."""

    # "build pod", "serving pod", ... for messages; `section` is the spec's: build or serving.
    who: str
    section: str
    amounts: Mapping[str, Fraction]
    priority_class: str | None = None


def pod_ask(
    main: PodResources, helper: PodResources | None, *, who: str, section: str, priority_class: str | None
) -> PodAsk:
    """What a pod of the `main` container (and an init container with `helper`'s resources) counts.

    As admission counts a pod: its containers' requests and limits, or an init container's where larger.
    """
    amounts: dict[str, Fraction] = {"pods": Fraction(1), "count/pods": Fraction(1)}
    for kind, values in (("requests", main.requests), ("limits", main.limits)):
        for name, value in values.items():
            helper_values = (helper.requests if kind == "requests" else helper.limits) if helper else {}
            amount = max(quantities.parse(value), quantities.parse(helper_values.get(name, "0")))
            amounts[f"{kind}.{name}"] = amount
            if kind == "requests" and name in _BARE:
                amounts[name] = amount
    if main.gpus:
        amounts[f"requests.{GPU_RESOURCE}"] = Fraction(main.gpus)
    return PodAsk(who, section, amounts, priority_class)


def together(parts: Sequence[tuple[PodAsk, int]], who: str) -> PodAsk:
    """`count` pods of each ask, as one ask (what they count against a quota together), called `who`."""
    amounts: dict[str, Fraction] = {}
    for ask, count in parts:
        for name, amount in ask.amounts.items():
            amounts[name] = amounts.get(name, Fraction(0)) + amount * count
    first = parts[0][0]
    return PodAsk(who, first.section, amounts, first.priority_class)


def _selects(term: tuple[str, str, tuple[str, ...]], ask: PodAsk) -> bool:
    scope, operator, values = term
    if scope == "PriorityClass":
        name = ask.priority_class
        return {
            "In": name in values,
            "NotIn": name not in values,
            "Exists": name is not None,
            "DoesNotExist": name is None,
        }.get(operator, False)
    inside = scope in _IN_SCOPES
    if scope not in _IN_SCOPES | _OUT_OF_SCOPES:
        return False
    return inside if operator == "Exists" else not inside if operator == "DoesNotExist" else False


def counts(quota: QuotaFacts, ask: PodAsk) -> bool:
    """Whether `quota` counts the pod: every scope it names selects it."""
    return all(_selects(term, ask) for term in quota.scopes)


@dataclass(frozen=True)
class Shortfall:
    """One resource a quota allows too little of for the pod."""

    resource: str
    asked: Fraction
    used: Fraction
    hard: Fraction

    def words(self) -> str:
        """`requests.memory 45Gi, with 0 of 16Gi used: 29Gi short`."""
        shown = [quantities.shown(self.resource, amount) for amount in (self.asked, self.used, self.hard)]
        short = quantities.shown(self.resource, self.used + self.asked - self.hard)
        return f"{self.resource} {shown[0]}, with {shown[1]} of {shown[2]} used: {short} short"


@dataclass(frozen=True)
class Refusal:
    """A quota that refuses a pod, and each resource it allows too little of."""

    quota: str
    ask: PodAsk
    shortfalls: tuple[Shortfall, ...]

    def message(self, owner: str) -> str:
        """What refuses what, with the figures: for the condition."""
        said = "; ".join(shortfall.words() for shortfall in self.shortfalls)
        return f"ResourceQuota {self.quota} refuses the {self.ask.who} of {owner}: it asks {said}"

    def fix(self) -> str:
        """What to do: raise the quota, or lower the pod's side, by field."""
        fields = sorted({self._field(shortfall.resource) for shortfall in self.shortfalls})
        return (
            f"raise the quota (kubectl describe resourcequota {self.quota}) or lower {' and '.join(fields)}; "
            "its controller creates the pod once it fits"
        )

    def _field(self, resource: str) -> str:
        if resource == f"requests.{GPU_RESOURCE}":
            return "the GPUs of a pod (spec.engine.tensorParallelSize or spec.serving.gpusPerPod)"
        if resource in ("pods", "count/pods"):
            return "spec.serving.replicas" if self.ask.section == "serving" else "the quota's other pods"
        kind, _, name = resource.rpartition(".")
        return f"spec.{self.ask.section}.pod.resources.{kind or 'requests'}.{name}"


def _amounts(pairs: Sequence[tuple[str, str]]) -> dict[str, Fraction]:
    found = {}
    for name, value in pairs:
        if quantities.is_quantity(value):
            found[name] = quantities.parse(value)
    return found


def refusal(quotas: Sequence[QuotaFacts], ask: PodAsk) -> Refusal | None:
    """The first quota (by name) that refuses the pod `ask`, or None when every quota has room for it."""
    for quota in sorted(quotas, key=lambda q: q.name):
        if not counts(quota, ask):
            continue
        hard, used = _amounts(quota.hard), _amounts(quota.used)
        shortfalls = tuple(
            Shortfall(name, ask.amounts[name], used.get(name, Fraction(0)), limit)
            for name, limit in sorted(hard.items())
            if ask.amounts.get(name) and used.get(name, Fraction(0)) + ask.amounts[name] > limit
        )
        if shortfalls:
            return Refusal(quota.name, ask, shortfalls)
    return None


def job_refusal(
    resources: PlannedResources, spec: MultimodalDeploymentSpec, observed: Observed
) -> Refusal | None:
    """The quota that refuses the Job's pod, while the Job has none."""
    job = observed.job
    if observed.quotas is None or resources.job is None or job is None or observed.job_pods:
        return None
    if job.succeeded or job.failed or job.meta.deleting:
        return None
    who = f"{resources.job.pod.lower()} pod"
    return refusal(
        observed.quotas,
        pod_ask(
            resources.job, None, who=who, section="build", priority_class=spec.build.pod.priority_class_name
        ),
    )


def serving_refusal(
    resources: PlannedResources, spec: MultimodalDeploymentSpec, observed: Observed
) -> Refusal | None:
    """The quota that refuses a serving pod, while the serving workload lacks pods.

    With a replica across pods, a leader while leaders are missing, else a worker.
    """
    workload = observed.deployment
    if observed.quotas is None or workload is None:
        return None
    priority = spec.serving.pod.priority_class_name
    leaders = sum(1 for pod in observed.serving_pods if pod.meta.label(labels.WORKER_INDEX) == "0")
    missing = (
        resources.serving if resources.worker is None or leaders < workload.replicas else resources.worker
    )
    who = f"{missing.pod.lower()} pod"
    ask = pod_ask(missing, resources.helper, who=who, section="serving", priority_class=priority)
    return refusal(observed.quotas, ask)
