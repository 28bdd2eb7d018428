"""`mmctl render`: what the operator would build and serve for one MultimodalDeployment, computed offline.

It writes the model repository, the derived limits and pod resources (`derived.json`, and one line per kind
of pod on the terminal), the build plan, the launch command and, under
`manifests/`, every object the operator applies for the resource (computed by the same code). Invalid
input prints one line per problem (field path and rule), exits non-zero and writes nothing; `validate`
checks many resources at once. The output directory keeps the list of what was written (`RENDERED`), so
that a later render removes what it no longer writes (a trtllm-serve render after a Triton one leaves
no `model_repository/` behind) and never a file the user put there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mmctl.documents import InputError, read_documents
from mmd_operator.api.v1alpha1 import MultimodalDeployment
from mmd_operator.api.validation import InvalidSpecError
from mmd_operator.config import OperatorConfig
from mmd_operator.desired.decision import manifest_files
from mmd_operator.plan.repository_check import RepositoryError
from mmd_operator.plan.resource_plan import AnyPlan, plan_resource

EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
# The list of the files a render wrote, in the output directory.
RENDERED = ".mmctl-rendered"


def load_document(path: Path) -> dict[str, Any]:
    """Read the single YAML document in `path` (`-` for stdin).

    Raises:
        InputError: if the file is missing, is not YAML, or does not hold exactly one mapping.
    """
    documents, error = read_documents(str(path))
    if error is not None:
        raise error
    if len(documents) != 1 or not isinstance(documents[0].content, dict):
        raise InputError(
            f"{path}: expected exactly one MultimodalDeployment document, found {len(documents)} "
            "(mmctl validate reads several)"
        )
    return documents[0].content


def load_and_plan(path: Path) -> tuple[MultimodalDeployment, AnyPlan]:
    """Validate the resource in `path` and derive its checked plan.

    Raises:
        InputError: if the file cannot be read.
        InvalidSpecError: if the resource breaks a rule.
    """
    return plan_resource(load_document(path))


def rendered_files(resource: MultimodalDeployment, plan: AnyPlan) -> dict[str, str]:
    """The plan's files and, under `manifests/`, every object the operator applies for the resource."""
    objects = manifest_files(resource, plan, config=OperatorConfig())
    return {**plan.files(), **{f"manifests/{name}": text for name, text in objects.items()}}


def _written_before(out_dir: Path) -> list[str]:
    """What an earlier render wrote into `out_dir`, as its list says (only paths inside it)."""
    listed = out_dir / RENDERED
    if not listed.is_file():
        return []
    inside = out_dir.resolve()
    return [
        relative
        for relative in listed.read_text().splitlines()
        if relative and (out_dir / relative).resolve().is_relative_to(inside)
    ]


def _remove_stale(out_dir: Path, stale: list[str]) -> None:
    """Remove the files of `stale`, then each directory that held one and is empty now."""
    directories: set[Path] = set()
    for relative in stale:
        target = out_dir / relative
        if target.is_file() or target.is_symlink():
            target.unlink()
        directories.update(parent for parent in target.parents if out_dir in parent.parents)
    for directory in sorted(directories, key=lambda d: len(d.parts), reverse=True):
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()


def write_files(out_dir: Path, files: dict[str, str]) -> None:
    """Write `files` under `out_dir`, removing what an earlier render wrote and this one does not."""
    _remove_stale(out_dir, sorted(set(_written_before(out_dir)) - set(files)))
    for relative, content in files.items():
        target = out_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    (out_dir / RENDERED).write_text("".join(f"{relative}\n" for relative in sorted(files)))


def _load_or_report(path: Path) -> tuple[MultimodalDeployment, AnyPlan] | int:
    """The resource and its plan, or the exit code after telling the user what is wrong."""
    try:
        return load_and_plan(path)
    except InputError as error:
        print(error, file=sys.stderr)
        return EXIT_USAGE
    except InvalidSpecError as invalid:
        count = len(invalid.problems)
        print(
            f"{path}: invalid MultimodalDeployment ({count} problem{'s' if count != 1 else ''})",
            file=sys.stderr,
        )
        for problem in invalid.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_INVALID
    except RepositoryError as error:
        # The same check Triton does at load time; a failure here is our bug, not the user's.
        print(f"internal error: the rendered repository is inconsistent: {error}", file=sys.stderr)
        return EXIT_INTERNAL


def run_render(args: argparse.Namespace) -> int:
    """Handle `mmctl render`."""
    path, out_dir = Path(args.file), Path(args.output)
    loaded = _load_or_report(path)
    if isinstance(loaded, int):
        return loaded
    resource, plan = loaded
    files = rendered_files(resource, plan)
    write_files(out_dir, files)
    print(
        f"rendered {resource.metadata.get('name')} ({plan.spec.model.type} on {plan.runtime}) into {out_dir}"
    )
    print(f"  key          {plan.cache_key}")
    for line in plan.resources.lines():
        print(f"  resources    {line}")
    for written in sorted(files):
        print(f"  {written}")
    return 0


def configure(render: argparse.ArgumentParser) -> None:
    """Add `render`'s arguments to its parser."""
    render.description = (
        "Render what the operator would create for one MultimodalDeployment, without a cluster."
    )
    render.add_argument("-f", "--file", required=True, help="MultimodalDeployment YAML ('-' for stdin)")
    render.add_argument("-o", "--output", required=True, help="directory to write into")
    render.set_defaults(handler=run_render)
