"""The repository's own house rules, which no off-the-shelf linter checks (`make lint`).

- Sizes a reader can hold: no module of a distribution or of the maintainer tooling over `MODULE_LINES`
  lines, no `__init__.py` over `INIT_LINES` (the tests' data tables and the benchmark harness are not
  bounded);
- the README within `README_LINES` lines;
- a package docstring that lists its modules ("- `name`: what it does") lists exactly the package's
  modules and sub-packages;
- nothing in the repository points at a file outside it (the sibling `shared/` folder of a developer's
  checkout, say), and every relative link of a Markdown page leads to a file that exists;
- every repository path the prose names exists: in the Markdown pages, the comments of the Makefile, the
  Dockerfile, the scripts, the YAML and TOML files, and the comments and docstrings of the Python modules,
  a path that starts with one of the repository's folders (`docs/...`, `scripts/...`, `tests/...`) or a
  distribution's package (`mmd_operator/...`), other projects' paths excepted (`FOREIGN_PATHS`);
- no `pip install` in the repository (docs, messages, scripts, the Dockerfile) names one of our
  distributions as a package index would serve it, unless with `--no-index`: this project registers no
  name on an index, so whoever does would be installed; a hint names the checkout's paths instead.

    python -m tools.lint.house

Prints every breach and exits 1 if there is one. Maintainer tooling; imports the standard library.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "operator/mmd_operator",
    "engine_builder/engine_builder",
    "cli/mmctl",
    "testbed/mmd_testbed",
    "tools",
)
MODULE_LINES = 700
INIT_LINES = 100
README_LINES = 220
# "- `name`: ..." (or "- `one`, `two`: ...") at the start of a docstring line, or after "; " in it, names
# modules.
_LISTED = re.compile(r"(?:^- |; )((?:`\w+`(?:, | and )?)+):")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# The names of our distributions, which this project has registered on no package index.
OUR_DISTRIBUTIONS = frozenset({"mmctl", "mmd-operator", "mmd-engine-builder", "mmd-testbed"})
# A `pip install` command, up to where the shell (or a sentence's quote) ends it.
_PIP_INSTALL = re.compile(r"pip3? install\b([^\n;&|)`]*)")
# Paths out of the repository: a sibling checkout's shared folder, or the workspace it lives in.
_OUTSIDE = re.compile(r"\.\./shared\b|(?<![\w.])/work/(?:shared|main)\b")
# A distribution's package, where a path may start, and the source folder it lives in.
PACKAGE_FOLDERS = {
    "mmd_operator": "operator",
    "engine_builder": "engine_builder",
    "mmctl": "cli",
    "mmd_testbed": "testbed",
}
# Paths of other projects that the prose names and that start like ours, with the project they are in.
FOREIGN_PATHS = {
    "docs/source/models/supported-models.md": "TensorRT-LLM",
    "docs/source/models/": "TensorRT-LLM",
    "docs/source/commands/trtllm-serve.rst": "TensorRT-LLM",
    "deploy/operator/internal/dynamo/backend_trtllm.go": "ai-dynamo/dynamo",
    "tools/multimodal/client.py": "tensorrtllm_backend",
    "tools/whisper/client.py": "tensorrtllm_backend",
    "docs/introduction/compatibility.md": "triton-inference-server/server",
}
# Files whose `#` lines are comments (the Python modules' comments are read with the tokenizer).
_HASH_COMMENTED = (".sh", ".yaml", ".yml", ".toml", ".tpl", ".txt", ".cfg", ".ini")
_HASH_COMMENTED_NAMES = ("Makefile", "Dockerfile", ".gitignore", ".dockerignore")
# Generated files: they say what their source says.
_GENERATED = ("tests/golden/",)


def _modules(root: Path) -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((root / package).rglob("*.py"))


def oversized(root: Path = REPO_ROOT) -> list[str]:
    """Modules over their bound, as `path: N lines (at most M)`."""
    breaches = []
    for path in _modules(root):
        bound = INIT_LINES if path.name == "__init__.py" else MODULE_LINES
        lines = len(path.read_text().splitlines())
        if lines > bound:
            breaches.append(f"{path.relative_to(root)}: {lines} lines (at most {bound})")
    readme = len((root / "README.md").read_text().splitlines())
    if readme > README_LINES:
        breaches.append(f"README.md: {readme} lines (at most {README_LINES})")
    return breaches


def listed_modules(init: Path) -> set[str] | None:
    """The modules the package docstring of `init` lists, or None when it lists none."""
    docstring = ast.get_docstring(ast.parse(init.read_text())) or ""
    names = {
        name
        for line in docstring.splitlines()
        for group in _LISTED.findall(line.strip())
        for name in re.findall(r"`(\w+)`", group)
    }
    return names or None


def package_modules(package: Path) -> set[str]:
    """The modules and sub-packages of `package`."""
    modules = {p.stem for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    return modules | {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}


def misdocumented(root: Path = REPO_ROOT) -> list[str]:
    """Packages whose docstring's list of modules differs from their files."""
    breaches = []
    for init in _modules(root):
        if init.name != "__init__.py":
            continue
        listed = listed_modules(init)
        if listed is None:
            continue
        present = package_modules(init.parent)
        missing, extra = sorted(present - listed), sorted(listed - present)
        if missing or extra:
            where = init.parent.relative_to(root)
            breaches.append(
                f"{where}: the docstring leaves out {missing or 'nothing'}, names {extra or 'nothing'} too"
            )
    return breaches


def tracked(root: Path, *patterns: str) -> list[str]:
    """The names of the files git tracks under `root` (those matching `patterns`, when given)."""
    listed = subprocess.run(
        ["git", "ls-files", *patterns], cwd=root, capture_output=True, text=True, check=True
    )
    return listed.stdout.splitlines()


def tracked_texts(root: Path = REPO_ROOT) -> Iterator[tuple[str, str]]:
    """(name, text) of every file git tracks that reads as text, but this module."""
    for name in tracked(root):
        path = root / name
        if path.suffix in (".tar", ".png", ".binpb", ".sum") or not path.is_file():
            continue
        if path == Path(__file__).resolve():
            continue
        try:
            yield name, path.read_text()
        except UnicodeDecodeError:
            continue


def outside_pointers(root: Path = REPO_ROOT) -> list[str]:
    """Lines of tracked files that point at a file outside the repository."""
    return [
        f"{name}:{number}: points outside the repository: {line.strip()[:80]}"
        for name, text in tracked_texts(root)
        for number, line in enumerate(text.splitlines(), 1)
        if _OUTSIDE.search(line)
    ]


def broken_links(root: Path = REPO_ROOT) -> list[str]:
    """Relative links of the Markdown pages that lead nowhere."""
    breaches = []
    for name in tracked(root, "*.md"):
        page = root / name
        for target in _LINK.findall(page.read_text()):
            path = target.split("#", 1)[0]
            if path and "://" not in target and not (page.parent / path).exists():
                breaches.append(f"{name}: the link to {target} leads nowhere")
    return breaches


def _docstrings(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                yield docstring


def prose(name: str, text: str) -> list[str]:
    """The prose of the file `name` (its text `text`): a page's text, a program's comments and docstrings."""
    path = Path(name)
    if path.suffix == ".md":
        return [text]
    if path.suffix == ".py":
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
            tree = ast.parse(text)
        except (SyntaxError, tokenize.TokenError):
            return []
        return [t.string for t in tokens if t.type == tokenize.COMMENT] + list(_docstrings(tree))
    if path.suffix in _HASH_COMMENTED or path.name in _HASH_COMMENTED_NAMES:
        comments = [line.split("#", 1)[1] for line in text.splitlines() if "#" in line]
        return comments + re.findall(r"\{\{-?\s*/\*(.*?)\*/", text, re.DOTALL)  # and a template's comments
    return []


def _path_pattern(root: Path) -> re.Pattern[str]:
    """A path that starts with a folder of the repository or a package, not inside a URL or another path.

    The repository's folders are those git tracks: what a run writes (`out/`, `wheelhouse/`) is no
    repository path, and a page may name what a command writes there.
    """
    folders = {name.split("/", 1)[0] for name in tracked(root) if "/" in name}
    folders = {folder for folder in folders if not folder.startswith(".")}
    folders |= set(PACKAGE_FOLDERS)
    starts = "|".join(sorted(map(re.escape, folders), key=len, reverse=True))
    return re.compile(rf"(?<![\w./:@~$-])((?:{starts})/[\w.+/-]*[\w+/-])(?![\w.+/-]*[{{*<$])")


def _exists(root: Path, path: str) -> bool:
    """Whether `path` is a file or folder of the repository, or of a package's source folder.

    A Python name after its module's path (`tests/support/downloads.commit_of`) counts as the module.
    """
    first = path.split("/", 1)[0]
    candidates = [root / path]
    if first in PACKAGE_FOLDERS:
        candidates.append(root / PACKAGE_FOLDERS[first] / path)
    stem, dot, _ = path.rpartition(".")
    if dot and "/" not in path[len(stem) :]:
        candidates += [
            candidate.with_name(candidate.name.rpartition(".")[0] + ".py") for candidate in list(candidates)
        ]
    return any(candidate.exists() for candidate in candidates)


def missing_paths(
    name: str, text: str, root: Path = REPO_ROOT, pattern: re.Pattern[str] | None = None
) -> list[str]:
    """The repository paths the prose of `name` names that lead nowhere (`pattern`: `_path_pattern(root)`)."""
    pattern = pattern or _path_pattern(root)
    found = []
    for chunk in prose(name, text):
        for path in pattern.findall(chunk):
            if path not in FOREIGN_PATHS and not _exists(root, path) and path not in found:
                found.append(path)
    return found


def stale_paths(root: Path = REPO_ROOT) -> list[str]:
    """Repository paths named in the prose of tracked files (pages, comments, docstrings), leading nowhere."""
    pattern = _path_pattern(root)  # one listing of the tracked folders for every file
    return [
        f"{name}: names {missing}, which does not exist"
        for name, text in tracked_texts(root)
        if not name.startswith(_GENERATED)
        for missing in missing_paths(name, text, root, pattern)
    ]


def index_installs(text: str) -> list[str]:
    """The `pip install` commands of `text` that ask a package index for one of `OUR_DISTRIBUTIONS`."""
    found = []
    for command in _PIP_INSTALL.findall(text.replace("\\\n", " ")):
        if "--no-index" in command:
            continue
        for word in command.split():
            name = re.match(r"[A-Za-z0-9._-]+", word.strip("'\"`"))
            if word.startswith("-") or name is None or "/" in word:
                continue
            if re.sub(r"[._]", "-", name.group()).lower() in OUR_DISTRIBUTIONS:
                found.append(" ".join(command.split()))
                break
    return found


def index_names(root: Path = REPO_ROOT) -> list[str]:
    """Lines of tracked files whose `pip install` would take one of our names from a package index."""
    return [
        f"{name}: `{command}` would install a stranger's package: name the checkout's path instead"
        for name, text in tracked_texts(root)
        if not name.endswith(".json")
        for command in index_installs(text)
    ]


def main() -> int:
    """Print every breach of the house rules; 1 if there is one."""
    breaches = (
        oversized() + misdocumented() + outside_pointers() + broken_links() + stale_paths() + index_names()
    )
    for breach in breaches:
        print(breach)
    print(f"house rules: {len(breaches)} breach{'es' if len(breaches) != 1 else ''}")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
