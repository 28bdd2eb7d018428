"""The YAML (and JSON) documents `mmctl` reads: files, directories searched recursively, and stdin.

Every document keeps where it came from (the file as named, its position in the stream, the line it
starts on and the line of each of its fields), so a report can point at it. Reading never passes on
nothing: a file without a document, a directory without a YAML or JSON file and a mapping with a key
twice (YAML forbids it; PyYAML alone would keep the last value silently) are input errors with the file
and, where there is one, the line. Imports PyYAML.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

STDIN = "-"
STDIN_NAME = "<stdin>"
# What a directory is searched for; other files in it are not read.
SUFFIXES = (".yaml", ".yml", ".json")
_MERGE_TAG = "tag:yaml.org,2002:merge"
# The parts of a field path as the API server writes it: `spec.resources.limits[memory]`, `args[0]`.
_PATH_PART = re.compile(r"[^.\[\]]+")


class InputError(Exception):
    """An input cannot be read, is not YAML, or holds nothing to check."""


@dataclass(frozen=True)
class Document:
    """One YAML document of an input."""

    source: str
    """The file as found from the command line (`<stdin>` for `-`)."""
    index: int
    """Position in its file, from 1, counting every `---` document."""
    line: int
    """Line of the file the document starts on, from 1."""
    content: Any
    """What the document holds: a mapping for a Kubernetes object."""
    field_lines: Mapping[tuple[str, ...], int] = field(default_factory=dict, repr=False, compare=False)
    """The line of each field and list item, by its path's parts (`("spec", "engine", "maxSeqLen")`)."""

    def line_of(self, path: str) -> int:
        """The line of the field `path` (`spec.engine.maxSeqLen`, `spec.x[0]`).

        Else the line of the nearest field above it that the document has, else the document's own.
        """
        parts = tuple(_PATH_PART.findall(path))
        while parts:
            if parts in self.field_lines:
                return self.field_lines[parts]
            parts = parts[:-1]
        return self.line


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that has a key twice, with both lines."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue  # a merge key's entries may be overridden; that is what it is for
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first_lines:
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f'found the key "{key}" twice (first at line {first_lines[key]}): '
                    "the first value would be silently dropped",
                    key_node.start_mark,
                )
            first_lines[key] = line
        return super().construct_mapping(node, deep=deep)


def _field_lines(node: Node, parts: tuple[str, ...], lines: dict[tuple[str, ...], int]) -> None:
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode):
                key = (*parts, str(key_node.value))
                lines[key] = key_node.start_mark.line + 1
                _field_lines(value_node, key, lines)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            key = (*parts, str(index))
            lines[key] = item.start_mark.line + 1
            _field_lines(item, key, lines)


def input_files(arguments: Sequence[str]) -> tuple[list[str], list[InputError]]:
    """Each argument, a directory replaced by its YAML and JSON files, and an error per directory of none.

    A directory is searched recursively, its files taken by name. Hidden files and directories (`.git`)
    are left out; a missing path is kept as it is, for the reader to report.
    """
    files: list[str] = []
    errors: list[InputError] = []
    for argument in arguments:
        path = Path(argument)
        if argument == STDIN or not path.is_dir():
            files.append(argument)
            continue
        found = [
            str(candidate)
            for candidate in sorted(path.rglob("*"))
            if candidate.suffix in SUFFIXES
            and candidate.is_file()
            and not any(part.startswith(".") for part in candidate.relative_to(path).parts)
        ]
        if not found:
            errors.append(
                InputError(f"{argument}: no {', '.join('*' + s for s in SUFFIXES)} file in the directory")
            )
        files += found
    return files, errors


def _read_text(name: str) -> str:
    try:
        return sys.stdin.read() if name == STDIN else Path(name).read_text()
    except FileNotFoundError:
        raise InputError(f"{name}: no such file or directory") from None
    except OSError as error:
        raise InputError(f"{name}: cannot read: {error.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{name}: cannot read: not UTF-8 text") from None


def _yaml_error(source: str, error: yaml.YAMLError) -> InputError:
    mark = getattr(error, "problem_mark", None)
    where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return InputError(f"{source}{where}: not valid YAML: {problem}")


def read_documents(name: str) -> tuple[list[Document], InputError | None]:
    """The non-empty documents of the file `name` (`-` for stdin), and why reading stopped early, if it did.

    Documents before a YAML error are returned with the error; a file that cannot be read, or holds no
    document, has none.
    """
    source = STDIN_NAME if name == STDIN else name
    try:
        text = _read_text(name)
    except InputError as error:
        return [], error
    documents: list[Document] = []
    loader = _UniqueKeyLoader(text)
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            index += 1
            content = loader.construct_document(node)
            if node is not None and content is not None:
                lines: dict[tuple[str, ...], int] = {}
                _field_lines(node, (), lines)
                documents.append(Document(source, index, node.start_mark.line + 1, content, lines))
    except yaml.YAMLError as error:
        return documents, _yaml_error(source, error)
    finally:
        loader.dispose()
    if not documents:
        what = "is empty" if not text.strip() else "holds no YAML document, only comments or empty ones"
        return [], InputError(f"{source}:1: nothing to check: the file {what}")
    return documents, None


def add_file_argument(parser: argparse.ArgumentParser) -> None:
    """The `-f/--file` argument of the commands that read many documents (repeatable)."""
    parser.add_argument(
        "-f",
        "--file",
        action="append",
        required=True,
        metavar="PATH",
        help=f"a YAML or JSON file (several documents allowed), a directory (searched recursively for "
        f"*.yaml, *.yml, *.json) or '{STDIN}' for stdin; repeatable",
    )
