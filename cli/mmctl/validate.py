"""`mmctl validate`: every MultimodalDeployment in files, directories or stdin, checked offline, for CI.

Each resource gets the checks the API server and the operator make (schema, CEL rules, derived limits,
with the words of `api.validation`) and the warning rules of `api.warning_rules` (the words the chart's
admission policy makes `kubectl apply` print). Documents of other kinds are skipped and counted, so the
command runs over a whole GitOps repository; a kind that is a near miss of MultimodalDeployment
(`MultiModalDeployment`), or another kind of its API group, is an error, not skipped. It never passes on
nothing: inputs without a single MultimodalDeployment are an input error. One line per resource,
`file:line namespace/name verdict` (the line the document starts on), its problems indented below, then
a summary line; `-o json` gives the same as one JSON document, each problem with its field's line (its
shape is in docs/resource.md). A valid resource's lines name the CPU and memory each kind of its pods
asks for (`resources:`). The exit codes are `EXIT_CODES`. `--cluster` adds the read-only preflight of
`cli.preflight` against the current kubeconfig. `--gpu` weighs each resource against one kind of GPU
(`gpu_check`: the capability its precision needs, whether the model fits its memory), as the operator
does against the kinds its placement reaches. Imports the api, the planner, the CLI's document reader,
the preflight and the kube client.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import urllib3

from mmctl.documents import Document, InputError, add_file_argument, input_files, read_documents
from mmctl.preflight import ClusterUnavailableError, Severity, ask_cluster, preflight, unreachable
from mmd_operator.api.v1alpha1 import GROUP, KIND, MultimodalDeployment
from mmd_operator.api.validation import InvalidSpecError, Problem, check_resource
from mmd_operator.api.warning_rules import SpecWarning, spec_warnings
from mmd_operator.facts import GpuKind
from mmd_operator.knowledge import GPU_PRODUCTS
from mmd_operator.kube.client import KubeClient, KubeconfigError
from mmd_operator.plan.fit import KindOffer, fit
from mmd_operator.plan.pod_resources import PlannedResources
from mmd_operator.plan.repository_check import RepositoryError
from mmd_operator.plan.resource_plan import AnyPlan, plan_resource

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_UNREADABLE = 2
EXIT_INTERNAL = 3
EXIT_CLUSTER = 4
# What each exit status means (`mmctl validate --help` and docs/resource.md say the same).
EXIT_CODES = {
    EXIT_OK: "every resource is valid (warnings allowed without --strict)",
    EXIT_INVALID: "a resource is invalid, or has a warning with --strict",
    EXIT_UNREADABLE: "an input cannot be read or holds nothing to check (a missing path, an empty file "
    "or directory, not YAML, a key twice, no MultimodalDeployment at all), or the command line is wrong",
    EXIT_INTERNAL: "an internal error of mmctl (a bug: please report it)",
    EXIT_CLUSTER: "--cluster could not ask the cluster: the kubeconfig cannot be read, the API server "
    "cannot be reached, or it refuses the credentials",
}
HELP_WIDTH = 78
# How alike (difflib's ratio, case folded) a kind must be to MultimodalDeployment to be taken for a typo.
NEAR_MISS_RATIO = 0.85

OK, WARNINGS, INVALID = "ok", "warnings", "invalid"

# A further check of a resource that passed every offline rule, given its checked plan: the problems,
# warnings and notes (what was found fine) it finds. The read-only `--cluster` preflight is one.
ResourceCheck = Callable[
    [MultimodalDeployment, AnyPlan],
    tuple[Sequence[Problem], Sequence[SpecWarning], Sequence[str]],
]
# The rule names of a warning the cluster preflight found, and of one `--gpu` found.
CLUSTER_RULE = "cluster"
GPU_RULE = "gpu"


@dataclass(frozen=True)
class Verdict:
    """What one MultimodalDeployment document is found to be."""

    document: Document
    errors: tuple[Problem, ...]
    warnings: tuple[SpecWarning, ...]
    cache_key: str | None = None
    # What a further check found fine (the cluster preflight's figures), for people.
    notes: tuple[str, ...] = ()
    # The warning rule behind each error that was a warning before `--strict` made it an error.
    strict_rules: dict[Problem, str] = field(default_factory=dict)
    # The CPU and memory each kind of its pods asks for (a valid resource's plan).
    resources: PlannedResources | None = None

    @property
    def verdict(self) -> str:
        """ok, warnings or invalid."""
        return INVALID if self.errors else (WARNINGS if self.warnings else OK)

    @property
    def namespace(self) -> str | None:
        """`metadata.namespace`, if the document names one."""
        value = _metadata(self.document).get("namespace")
        return str(value) if value else None

    @property
    def name(self) -> str | None:
        """`metadata.name`, if the document has one."""
        value = _metadata(self.document).get("name")
        return str(value) if value else None


@dataclass
class Report:
    """Everything one run found, in input order."""

    resources: list[Verdict] = field(default_factory=list)
    skipped: list[Document] = field(default_factory=list)
    unreadable: list[InputError] = field(default_factory=list)

    def exit_code(self) -> int:
        """2 when an input cannot be read or nothing is checked, else 1 when one is invalid, else 0."""
        if self.unreadable or not self.resources:
            return EXIT_UNREADABLE
        return EXIT_INVALID if any(v.verdict == INVALID for v in self.resources) else EXIT_OK

    def count(self, verdict: str) -> int:
        """How many resources have `verdict`."""
        return sum(1 for v in self.resources if v.verdict == verdict)


def _metadata(document: Document) -> dict[str, Any]:
    metadata = document.content.get("metadata") if isinstance(document.content, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def is_resource(document: Document) -> bool:
    """Whether `document` is meant as a MultimodalDeployment (whatever its apiVersion says)."""
    return isinstance(document.content, dict) and document.content.get("kind") == KIND


def kind_near_miss(document: Document) -> Problem | None:
    """The problem of a document meant as a MultimodalDeployment but of another kind, else None.

    Meant as one: a kind that is a near miss of the name (`MultiModalDeployment`), or any other kind of
    its API group.
    """
    content = document.content
    kind = content.get("kind") if isinstance(content, dict) else None
    if not isinstance(kind, str) or kind == KIND:
        return None
    folded = difflib.SequenceMatcher(None, kind.casefold(), KIND.casefold()).ratio()
    if folded >= NEAR_MISS_RATIO:
        return Problem(
            "kind",
            f'is "{kind}"; did you mean {KIND}? (kinds are case-sensitive: as written, the API server '
            "knows no such kind and this document would not be checked)",
        )
    api_version = content.get("apiVersion")
    if isinstance(api_version, str) and api_version.split("/")[0] == GROUP:
        return Problem("kind", f'is "{kind}", but {GROUP} has only the kind {KIND}')
    return None


def _warnings_of(resource: MultimodalDeployment | None) -> list[SpecWarning]:
    if resource is None:
        return []
    # As the API server sees it: with the schema's defaults filled in.
    return spec_warnings(resource.spec.model_dump(by_alias=True, exclude_none=True, mode="json"))


def gpu_offer(text: str) -> KindOffer:
    """A kind of GPU from `--gpu`.

    A product GPU feature discovery names (`NVIDIA-L4`), or `PRODUCT:CAPABILITY:MEMORY_MIB` for another.

    Raises:
        argparse.ArgumentTypeError: naming the known products, when `text` is neither.
    """
    product, *rest = text.split(":")
    if not rest and product in GPU_PRODUCTS:
        known = GPU_PRODUCTS[product]
        return KindOffer(GpuKind(product, known.compute_capability), known.memory_mib)
    if len(rest) == 2 and re.fullmatch(r"\d+\.\d+", rest[0]) and rest[1].isdigit():
        return KindOffer(GpuKind(product, rest[0]), int(rest[1]))
    raise argparse.ArgumentTypeError(
        f"{text!r} is neither a known product ({', '.join(GPU_PRODUCTS)}) nor PRODUCT:CAPABILITY:MEMORY_MIB "
        "(e.g. NVIDIA-RTX-6000-Ada:8.9:49140)"
    )


def gpu_check(offer: KindOffer) -> ResourceCheck:
    """Whether a resource can run on `offer`'s kind of GPU, as the operator judges it (`plan.fit`)."""

    def check(
        resource: MultimodalDeployment, plan: AnyPlan
    ) -> tuple[list[Problem], list[SpecWarning], list[str]]:
        del resource
        verdict = fit(plan.gpu_needs, [offer])
        errors = [Problem(*verdict.refusal)] if verdict.refusal is not None else []
        warnings = [SpecWarning(path, said, GPU_RULE) for path, said in verdict.warnings]
        fits = [] if errors else [f"gpu: fits {offer.kind.describe()}"]
        return errors, warnings, fits

    return check


def check_document(
    document: Document, checks: Sequence[ResourceCheck] = (), gpu_kind: GpuKind | None = None
) -> Verdict:
    """The verdict on one MultimodalDeployment document, its engine planned for `gpu_kind`.

    Raises:
        RepositoryError: when the rendered repository is inconsistent (a bug of ours, not the user's).
    """
    try:
        resource, plan = plan_resource(document.content, gpu_kind)
    except InvalidSpecError as invalid:
        parsed, _ = check_resource(document.content)
        return Verdict(document, tuple(invalid.problems), tuple(_warnings_of(parsed)))
    errors: list[Problem] = []
    warnings = _warnings_of(resource)
    notes: list[str] = []
    for check in checks:
        more_errors, more_warnings, more_notes = check(resource, plan)
        errors += more_errors
        warnings += more_warnings
        notes += more_notes
    return Verdict(
        document,
        tuple(errors),
        tuple(warnings),
        cache_key=plan.cache_key,
        notes=tuple(notes),
        resources=plan.resources,
    )


def _strict(verdict: Verdict) -> Verdict:
    """`verdict` with its warnings turned into errors."""
    as_errors = {Problem(w.path, w.message): w.rule for w in verdict.warnings}
    return replace(verdict, errors=verdict.errors + tuple(as_errors), warnings=(), strict_rules=as_errors)


def validate(
    inputs: Iterable[str],
    *,
    strict: bool = False,
    checks: Sequence[ResourceCheck] = (),
    gpu_kind: GpuKind | None = None,
) -> Report:
    """Check every MultimodalDeployment in `inputs` (files, directories, `-` for stdin), for `gpu_kind`.

    Raises:
        RepositoryError: when the rendered repository of a resource is inconsistent (a bug of ours).
    """
    report = Report()
    names, report.unreadable = input_files(list(inputs))
    for name in names:
        documents, error = read_documents(name)
        if error is not None:
            report.unreadable.append(error)
        for document in documents:
            near_miss = kind_near_miss(document)
            if near_miss is not None:
                report.resources.append(Verdict(document, (near_miss,), ()))
                continue
            if not is_resource(document):
                report.skipped.append(document)
                continue
            verdict = check_document(document, checks, gpu_kind)
            report.resources.append(_strict(verdict) if strict else verdict)
    if not report.resources and not report.unreadable:
        read = _plural(len(report.skipped), "document")
        nothing = f"nothing to check: no MultimodalDeployment among the {read} read"
        report.unreadable.append(InputError(nothing))
    return report


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _verdict_text(verdict: Verdict) -> str:
    if verdict.verdict == OK:
        return OK
    parts = [_plural(len(verdict.errors), "error")] if verdict.errors else []
    parts += [_plural(len(verdict.warnings), "warning")] if verdict.warnings else []
    return ", ".join(parts)


def _where(document: Document) -> str:
    return f"{document.source}:{document.line}"


def text_report(report: Report) -> list[str]:
    """The report as lines: one per resource with its problems indented, then the summary."""
    lines = []
    for verdict in report.resources:
        who = "/".join(part for part in (verdict.namespace, verdict.name or "(no name)") if part)
        lines.append(f"{_where(verdict.document)} {who} {_verdict_text(verdict)}")
        lines += [f"  {problem}" for problem in verdict.errors]
        lines += [f"  warning: {warning}" for warning in verdict.warnings]
        lines += [f"  note: {note}" for note in verdict.notes]
        if verdict.resources is not None:
            lines += [f"  resources: {line}" for line in verdict.resources.lines()]
    summary = (
        f"{_plural(len(report.resources), 'resource')}: {report.count(OK)} ok, "
        f"{report.count(WARNINGS)} with warnings, {report.count(INVALID)} invalid; "
        f"{_plural(len(report.skipped), 'other document')} skipped"
    )
    if report.unreadable:
        summary += f"; {_plural(len(report.unreadable), 'input error')}"
    return [*lines, summary]


def json_report(report: Report, *, strict: bool) -> dict[str, Any]:
    """The report as the JSON document `-o json` prints (documented in docs/resource.md)."""

    def error(verdict: Verdict, problem: Problem) -> dict[str, Any]:
        line = verdict.document.line_of(problem.path)
        entry = {"path": problem.path, "line": line, "message": problem.message}
        rule = verdict.strict_rules.get(problem)
        return {**entry, "rule": rule} if rule is not None else entry

    def warning(verdict: Verdict, warning: SpecWarning) -> dict[str, Any]:
        line = verdict.document.line_of(warning.path)
        return {"rule": warning.rule, "path": warning.path, "line": line, "message": warning.message}

    return {
        "resources": [
            {
                "file": v.document.source,
                "document": v.document.index,
                "line": v.document.line,
                "namespace": v.namespace,
                "name": v.name,
                "verdict": v.verdict,
                "errors": [error(v, problem) for problem in v.errors],
                "warnings": [warning(v, w) for w in v.warnings],
                "notes": list(v.notes),
                "cacheKey": v.cache_key,
                "podResources": [
                    pod.model_dump(by_alias=True) for pod in (v.resources.status() if v.resources else [])
                ],
            }
            for v in report.resources
        ],
        "skipped": [
            {
                "file": d.source,
                "document": d.index,
                "line": d.line,
                "apiVersion": d.content.get("apiVersion") if isinstance(d.content, dict) else None,
                "kind": d.content.get("kind") if isinstance(d.content, dict) else None,
            }
            for d in report.skipped
        ],
        "unreadable": [str(error) for error in report.unreadable],
        "summary": {
            "resources": len(report.resources),
            OK: report.count(OK),
            WARNINGS: report.count(WARNINGS),
            INVALID: report.count(INVALID),
            "skipped": len(report.skipped),
            "unreadable": len(report.unreadable),
        },
        "strict": strict,
        "exitCode": report.exit_code(),
    }


def cluster_check(client: KubeClient, default_namespace: str) -> ResourceCheck:
    """The read-only preflight against the cluster behind `client`, as a check of `validate`.

    A resource is checked in its own `metadata.namespace`, else in `default_namespace`.
    """

    def check(
        resource: MultimodalDeployment, plan: AnyPlan
    ) -> tuple[list[Problem], list[SpecWarning], list[str]]:
        namespace = str(resource.metadata.get("namespace") or default_namespace)
        try:
            findings = preflight(resource, plan, namespace, client)
        except urllib3.exceptions.HTTPError as error:  # the connection lost midway
            raise unreachable(client, error) from None
        return (
            [Problem(f.field, f.message) for f in findings if f.severity is Severity.ERROR],
            [
                SpecWarning(f.field, f.message, CLUSTER_RULE)
                for f in findings
                if f.severity is Severity.WARNING
            ],
            [f"{f.field}: {f.message}" for f in findings if f.severity is Severity.INFO],
        )

    return check


def _cluster_checks(args: argparse.Namespace) -> tuple[list[ResourceCheck], KubeClient | None]:
    """The cluster preflight of `--cluster`, once the cluster has answered.

    Raises:
        KubeconfigError: when the kubeconfig cannot be read.
        ClusterUnavailableError: when the cluster cannot be asked.
    """
    if not args.cluster:
        return [], None
    client = KubeClient.from_kubeconfig(
        args.kubeconfig, context=args.context, field_manager="mmctl", retries=1
    )
    try:
        ask_cluster(client)
    except ClusterUnavailableError:
        client.close()
        raise
    namespace = args.namespace or KubeClient.kubeconfig_namespace(args.kubeconfig, context=args.context)
    return [cluster_check(client, namespace)], client


def run(args: argparse.Namespace) -> int:
    """Handle `mmctl validate`."""
    try:
        checks, client = _cluster_checks(args)
    except KubeconfigError as error:
        where = args.kubeconfig or "$KUBECONFIG or ~/.kube/config"
        print(f"mmctl validate --cluster: cannot read the kubeconfig ({where}): {error}", file=sys.stderr)
        return EXIT_CLUSTER
    except ClusterUnavailableError as error:
        print(f"mmctl validate --cluster: {error}", file=sys.stderr)
        return EXIT_CLUSTER
    try:
        if args.gpu is not None:
            checks = [*checks, gpu_check(args.gpu)]
        gpu_kind = args.gpu.kind if args.gpu is not None else None
        report = validate(args.file, strict=args.strict, checks=checks, gpu_kind=gpu_kind)
    except RepositoryError as inconsistent:
        # The same check Triton does at load time; a failure here is our bug, not the user's.
        print(f"internal error: the rendered repository is inconsistent: {inconsistent}", file=sys.stderr)
        return EXIT_INTERNAL
    except ClusterUnavailableError as error:
        print(f"mmctl validate --cluster: {error}", file=sys.stderr)
        return EXIT_CLUSTER
    finally:
        if client is not None:
            client.close()
    if args.output == "json":
        print(json.dumps(json_report(report, strict=args.strict), indent=2))
    else:
        for unreadable in report.unreadable:
            print(unreadable, file=sys.stderr)
        print("\n".join(text_report(report)))
    return report.exit_code()


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `validate`'s arguments to its parser."""
    parser.description = textwrap.fill(
        "Check every MultimodalDeployment in the inputs offline: schema, CEL rules, derived "
        "limits, and the warnings the chart's admission policy prints at kubectl apply. Documents of "
        "other kinds are skipped. Each resource's line starts with file:line, the line its document "
        "starts on.",
        width=HELP_WIDTH,
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "exit status:\n" + "\n".join(
        textwrap.fill(meaning, HELP_WIDTH, initial_indent=f"  {code}  ", subsequent_indent="     ")
        for code, meaning in EXIT_CODES.items()
    )
    add_file_argument(parser)
    parser.add_argument("--strict", action="store_true", help="treat every warning as an error")
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="text lines (default) or JSON"
    )
    parser.add_argument(
        "--gpu",
        type=gpu_offer,
        metavar="PRODUCT[:CAPABILITY:MEMORY_MIB]",
        help="weigh each resource against this kind of GPU: the capability its precision needs and "
        f"whether the model fits its memory; known products: {', '.join(GPU_PRODUCTS)}",
    )
    cluster = parser.add_argument_group("cluster preflight (read-only)")
    cluster.add_argument(
        "--cluster",
        action="store_true",
        help="also ask the cluster: the namespace and its Pod Security level, the token Secret and key, "
        "source claims, the engine-cache claim or its StorageClass, a node with GPUs for one pod",
    )
    cluster.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    cluster.add_argument("--context", help="kubeconfig context (default: the current one)")
    cluster.add_argument(
        "-n", "--namespace", help="namespace of resources that name none (default: the context's)"
    )
    parser.set_defaults(handler=run)
