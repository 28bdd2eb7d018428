"""`mmctl migrate`: the trtllm-serve resource equivalent to an engine resource, or why there is none.

The triton-trtllm-engine runtime is frozen upstream at its last release (`knowledge.engine_path`). For a
model type that TensorRT-LLM's PyTorch backend serves at that release, this prints the MultimodalDeployment
that serves the same checkpoint on runtime trtllm-serve, with what changes in comments above it: named
`<name>-serve` (a resource's runtime is immutable, so the move is a second resource beside the first:
apply it, move the clients from Triton's API to the OpenAI API, then delete the first), without the
fields that mean nothing there (each named with what it belonged to), and checked by the rules `mmctl
validate` checks. For the other types it says why there is none. Reads every MultimodalDeployment of the
inputs; other documents are skipped. Imports the api, the knowledge and the CLI's document reader.
"""

from __future__ import annotations

import argparse
import copy
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import yaml

from mmctl.documents import Document, InputError, add_file_argument, input_files, read_documents
from mmd_operator.api.v1alpha1 import KIND, MAX_NAME_LENGTH
from mmd_operator.api.v1alpha1.rules import engine_only_fields
from mmd_operator.api.validation import check_resource, spec_runtime
from mmd_operator.knowledge import ModelType, Runtime
from mmd_operator.knowledge.engine_path import GAINED, GIVEN_UP, LAST_RELEASE, WAYS_OFF

EXIT_OK = 0
EXIT_NONE = 1
EXIT_UNREADABLE = 2
SUFFIX = "-serve"
# What `kubectl get -o yaml` adds to an object that an applied document must not carry.
_SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink")
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass(frozen=True)
class Migration:
    """One engine resource's way off: the trtllm-serve document and its notes, or why there is none."""

    where: str
    name: str
    document: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    # Why nothing can be printed (no way off, or the converted resource breaks a rule).
    refusal: str | None = None


def migrate(document: dict[str, Any], where: str) -> Migration | None:
    """The way off the engine path for `document`, or None if it is not an engine resource."""
    if document.get("kind") != KIND:
        return None
    return _BY_RUNTIME[spec_runtime(document.get("spec"))](document, where)


def _off_the_engine_path(document: dict[str, Any], where: str) -> Migration:
    spec = document.get("spec") or {}
    name = str((document.get("metadata") or {}).get("name", ""))
    named = (spec.get("model") or {}).get("type")
    try:
        model_type = ModelType(str(named))
    except ValueError:
        return Migration(where, name, refusal=f"model.type is {named!r}: not a known model type")
    way = WAYS_OFF[model_type]
    if not way.to_serve:
        return Migration(
            where,
            name,
            refusal=f"model type {model_type} has no trtllm-serve equivalent: {way.why}. It stays on runtime "
            f"triton-trtllm-engine, frozen upstream at {LAST_RELEASE}",
        )
    served = _served(document)
    left_out = [
        f"spec.{path}: {belongs}"
        for path, belongs in engine_only_fields().items()
        if _pop(served["spec"], path.split("."))
    ]
    _, problems = check_resource(served)
    if problems:
        broken = "; ".join(str(problem) for problem in problems)
        return Migration(
            where, name, refusal=f"its trtllm-serve equivalent breaks a rule, change it by hand: {broken}"
        )
    notes = (
        f"the trtllm-serve equivalent of {name} ({where}): {way.why}.",
        f"Given up: {GIVEN_UP}; gained: {GAINED}.",
        *(
            ["Left out, with no meaning on trtllm-serve:", *(f"  {line}" for line in left_out)]
            if left_out
            else []
        ),
        f"Apply it beside {name}, move the clients to its OpenAI API, then delete {name}.",
    )
    return Migration(where, name, served, notes)


def _already_served(document: dict[str, Any], where: str) -> None:
    """A resource on trtllm-serve has nothing to migrate."""


# What each runtime's resources migrate to (looked up once, as the operator looks its runtimes up).
_BY_RUNTIME: Mapping[Runtime, Callable[[dict[str, Any], str], Migration | None]] = MappingProxyType(
    {Runtime.TRITON_TRTLLM_ENGINE: _off_the_engine_path, Runtime.TRTLLM_SERVE: _already_served}
)


def _served(document: dict[str, Any]) -> dict[str, Any]:
    """A copy of `document` on runtime trtllm-serve, named apart, without what the server filled in."""
    served = copy.deepcopy(document)
    served.pop("status", None)
    metadata = served.setdefault("metadata", {})
    for key in _SERVER_FIELDS:
        metadata.pop(key, None)
    annotations = metadata.get("annotations") or {}
    annotations.pop(_LAST_APPLIED, None)
    if "annotations" in metadata and not annotations:
        del metadata["annotations"]
    metadata["name"] = str(metadata.get("name", ""))[: MAX_NAME_LENGTH - len(SUFFIX)] + SUFFIX
    spec = served["spec"]
    served["spec"] = {
        "runtime": str(Runtime.TRTLLM_SERVE),
        **{k: v for k, v in spec.items() if k != "runtime"},
    }
    return served


def _pop(tree: dict[str, Any], path: Sequence[str]) -> bool:
    """Remove `path` from `tree` (and a parent it leaves empty); whether it was there."""
    head, *rest = path
    if head not in tree:
        return False
    if rest:
        child = tree[head]
        if not isinstance(child, dict) or not _pop(child, rest):
            return False
        if not child:
            del tree[head]
        return True
    del tree[head]
    return True


def _comment(lines: Sequence[str]) -> str:
    wrapped = (
        textwrap.fill(
            line, 110, initial_indent="# ", subsequent_indent="#   " if line.startswith("  ") else "# "
        )
        for line in lines
    )
    return "\n".join(wrapped) + "\n"


def run_migrate(args: argparse.Namespace) -> int:
    """Print the migrations of every engine resource in the inputs; returns the exit code."""
    files, errors = input_files(args.file)
    documents: list[Document] = []
    for name in files:
        read, error = read_documents(name)
        documents += read
        if error is not None:
            errors.append(error)
    for error in errors:
        print(error, file=sys.stderr)
    migrations = [
        found
        for document in documents
        if isinstance(document.content, dict)
        and (found := migrate(document.content, f"{document.source}:{document.line}")) is not None
    ]
    if errors:
        return EXIT_UNREADABLE
    if not migrations:
        print(
            InputError(f"{', '.join(args.file)}: no MultimodalDeployment on runtime triton-trtllm-engine"),
            file=sys.stderr,
        )
        return EXIT_UNREADABLE
    printed = [
        _comment(migration.notes) + yaml.safe_dump(migration.document, sort_keys=False, width=110)
        for migration in migrations
        if migration.document is not None
    ]
    sys.stdout.write("---\n".join(printed))
    refused = [migration for migration in migrations if migration.refusal is not None]
    for migration in refused:
        print(f"{migration.where} {migration.name}: {migration.refusal}", file=sys.stderr)
    return EXIT_NONE if refused else EXIT_OK


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `migrate`'s arguments to its parser."""
    parser.description = textwrap.fill(
        f"Print the trtllm-serve MultimodalDeployment equivalent to each engine resource of the inputs "
        f"(runtime triton-trtllm-engine, frozen upstream at {LAST_RELEASE}), or say why a model type has "
        "none. The new resource is named <name>-serve: apply it beside the old one, move the clients to "
        "the OpenAI API, then delete the old one.",
        width=100,
    )
    add_file_argument(parser)
    parser.epilog = (
        f"exit status: {EXIT_OK} every engine resource printed; {EXIT_NONE} one has no equivalent or needs "
        f"a change by hand (the others are printed); {EXIT_UNREADABLE} an input cannot be read or holds no "
        "engine resource"
    )
    parser.set_defaults(handler=run_migrate)
