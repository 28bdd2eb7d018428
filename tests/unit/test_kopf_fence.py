"""kopf's private API, fenced: every `kopf._…` name the operator uses is pinned here with its shape.

`handlers.py` feeds the controller from kopf's own watch streams, which live in `kopf._cogs`: kopf may
change them in any release, and `kopf` is pinned to one minor version for it. When a check here fails after
an upgrade of kopf, read the new kopf's module the message names for the same behaviour (list, then watch
from the listing's version, `Bookmark.LISTED` between them, listing items as events of type None), adjust
`handlers.stream` and this table, and run the cluster tier's operator tests; or take the way out that
docs/architecture.md ("How kopf is used, and why") names. The settings `handlers.configure` sets are
public, but a renamed one would be set without effect: they are checked too.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import kopf

from mmd_operator.config import OperatorConfig
from mmd_operator.handlers import configure

OPERATOR = Path(__file__).resolve().parents[2] / "operator" / "mmd_operator"
UPGRADE = (
    f"kopf {getattr(kopf, '__version__', '(version unknown)')} changed what the operator uses of it; see "
    "this test's docstring and docs/architecture.md, 'How kopf is used, and why'"
)


def _keyword_only(function: Callable[..., object], *names: str) -> bool:
    parameters = inspect.signature(function).parameters
    required = {n for n, p in parameters.items() if p.default is inspect.Parameter.empty}
    return all(parameters[n].kind is inspect.Parameter.KEYWORD_ONLY for n in names) and required <= set(names)


def _stream_parses_with_module_json(api: ModuleType) -> bool:
    # `handlers.parse_watch_events_with_orjson` swaps this module's `json` for orjson's parser.
    return hasattr(api.json, "loads") and "json.loads(" in inspect.getsource(api.stream)


def _infinite_watch(watching: ModuleType) -> bool:
    function = watching.infinite_watch
    return inspect.isasyncgenfunction(function) and _keyword_only(
        function, "settings", "resource", "namespace"
    )


def _listing_items_have_no_type(watching: ModuleType) -> bool:
    # With `initial_streaming` off, a listing's items come as events of type None (`handlers.stream`).
    return "'type': None" in inspect.getsource(watching.continuous_watch).replace('"', "'")


def _resource(references: ModuleType) -> bool:
    made = references.Resource("apps", "v1", "deployments", kind="Deployment", namespaced=True)
    return (made.group, made.version, made.plural, made.kind, made.namespaced) == (
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
    )


# (module, name) -> what the operator relies on of it.
PINNED: dict[tuple[str, str], Callable[[ModuleType], bool]] = {
    ("kopf._cogs.clients.api", "json"): _stream_parses_with_module_json,
    ("kopf._cogs.clients.watching", "infinite_watch"): lambda m: (
        _infinite_watch(m) and _listing_items_have_no_type(m)
    ),
    ("kopf._cogs.clients.watching", "Bookmark"): lambda m: m.Bookmark.LISTED in m.Bookmark,
    ("kopf._cogs.structs.references", "Resource"): _resource,
    ("kopf._cogs.structs.references", "NamespaceName"): lambda m: m.NamespaceName("ml") == "ml",
}


def private_names_used(root: Path = OPERATOR) -> set[tuple[str, str]]:
    """Every (private kopf module, attribute) the operator's modules use, through any alias."""
    used: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("kopf._"):
                        aliases[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kopf"):
                for alias in node.names:
                    module = f"{node.module}.{alias.name}"
                    if module.startswith("kopf._") or alias.name.startswith("_"):
                        aliases[alias.asname or alias.name] = module
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                used.add((aliases[node.value.id], node.attr))
    return used


def test_every_private_kopf_name_the_operator_uses_is_pinned() -> None:
    used = private_names_used()
    assert used, "the scan found no private kopf name: it no longer sees handlers.py's imports"
    assert used == set(PINNED), f"pin each private kopf name here (unpinned: {used - set(PINNED)})"


def test_each_pinned_name_has_the_shape_the_operator_relies_on() -> None:
    for (module_name, name), holds in PINNED.items():
        module = importlib.import_module(module_name)
        assert hasattr(module, name), f"{module_name}.{name} is gone: {UPGRADE}"
        assert holds(module), f"{module_name}.{name} no longer behaves as handlers.py expects: {UPGRADE}"


def test_every_setting_configure_sets_is_one_kopf_has() -> None:
    settings = kopf.OperatorSettings()
    configure(settings, OperatorConfig())
    for section in dataclasses.fields(settings):
        values = getattr(settings, section.name)
        if dataclasses.is_dataclass(values):
            known = {f.name for f in dataclasses.fields(values)}
            unknown = set(vars(values)) - known
            assert not unknown, f"settings.{section.name}.{unknown} set, which kopf does not have: {UPGRADE}"
    assert settings.watching.label_selectors, "the children's watches are narrowed by label"
