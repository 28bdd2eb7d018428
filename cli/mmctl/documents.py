"""The YAML (and JSON) documents `mmctl` reads: files, directories searched recursively, and stdin.

Every document keeps where it came from (the file as named, its position in the stream and the line it
starts on), so a report can point at it. Imports PyYAML.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

STDIN = "-"
STDIN_NAME = "<stdin>"
# What a directory is searched for; other files in it are not read.
SUFFIXES = (".yaml", ".yml", ".json")


class InputError(Exception):
    """An input cannot be read, or is not YAML."""


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


def input_files(arguments: Sequence[str]) -> Iterator[str]:
    """Each argument, with a directory replaced by its YAML and JSON files (recursively, by name).

    Hidden files and directories (`.git`) are left out; a missing path is yielded as it is, for the
    reader to report.
    """
    for argument in arguments:
        path = Path(argument)
        if argument == STDIN or not path.is_dir():
            yield argument
            continue
        for found in sorted(path.rglob("*")):
            hidden = any(part.startswith(".") for part in found.relative_to(path).parts)
            if found.suffix in SUFFIXES and found.is_file() and not hidden:
                yield str(found)


def _read_text(name: str) -> str:
    try:
        return sys.stdin.read() if name == STDIN else Path(name).read_text()
    except OSError as error:
        raise InputError(f"{name}: cannot read: {error.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{name}: cannot read: not UTF-8 text") from None


def _yaml_error(source: str, error: yaml.YAMLError) -> InputError:
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return InputError(f"{source}: not valid YAML{where}: {problem}")


def read_documents(name: str) -> tuple[list[Document], InputError | None]:
    """The non-empty documents of the file `name` (`-` for stdin), and why reading stopped early, if it did.

    Documents before a YAML error are returned with the error; a file that cannot be read has none.
    """
    source = STDIN_NAME if name == STDIN else name
    try:
        text = _read_text(name)
    except InputError as error:
        return [], error
    documents: list[Document] = []
    loader = yaml.SafeLoader(text)
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            index += 1
            content = loader.construct_document(node)
            if node is not None and content is not None:
                documents.append(Document(source, index, node.start_mark.line + 1, content))
    except yaml.YAMLError as error:
        return documents, _yaml_error(source, error)
    finally:
        loader.dispose()
    return documents, None
