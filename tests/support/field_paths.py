"""Server-side apply's field paths, as the in-memory API server keeps them, and the patch formats it reads.

A field path is the keys down to a value a manager can own: maps are followed down, an owner reference
is the element `("uid", <uid>)` of `metadata.ownerReferences` (a list keyed by uid in the API), and any
other list is owned whole. Pure functions of plain dicts; imports the standard library.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

Path = tuple[Any, ...]
# What the server sets and no write changes.
SYSTEM = frozenset(
    {"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"}
)
OWNERS = ("metadata", "ownerReferences")


def leaves(obj: Mapping[str, Any], prefix: Path = ()) -> dict[Path, Any]:
    """The fields of `obj` a manager can own: maps followed down, owner references by uid, lists whole."""
    found: dict[Path, Any] = {}
    for key, value in obj.items():
        path = (*prefix, key)
        if path in {("apiVersion",), ("kind",)} or (prefix == ("metadata",) and key in SYSTEM):
            continue
        if path == OWNERS and isinstance(value, list):
            found |= {(*path, ("uid", ref.get("uid"))): ref for ref in value}
        elif isinstance(value, dict) and value:
            found |= leaves(value, path)
        else:
            found[path] = value
    return found


def overlaps(one: Path, other: Path) -> bool:
    """Whether one path is the other or lies under it (either way)."""
    shorter = min(len(one), len(other))
    return one[:shorter] == other[:shorter]


def set_field(obj: dict[str, Any], path: Path, value: Any) -> None:
    """Set the field at `path` of `obj` to `value`, making the maps on the way."""
    if path[:2] == OWNERS and len(path) == 3:
        uid, references = path[2][1], obj["metadata"].get("ownerReferences") or []
        if any(ref.get("uid") == uid for ref in references):
            references = [copy.deepcopy(value) if ref.get("uid") == uid else ref for ref in references]
        else:
            references = [*references, copy.deepcopy(value)]
        obj["metadata"]["ownerReferences"] = references
        return
    node = obj
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = copy.deepcopy(value)


def remove_field(obj: dict[str, Any], path: Path) -> None:
    """Remove the field at `path` of `obj`, and the maps it leaves empty."""
    if path[:2] == OWNERS and len(path) == 3:
        references = [
            ref for ref in obj["metadata"].get("ownerReferences") or [] if ref.get("uid") != path[2][1]
        ]
        if references:
            obj["metadata"]["ownerReferences"] = references
        else:
            obj["metadata"].pop("ownerReferences", None)
        return
    trail = [obj]
    for key in path[:-1]:
        child = trail[-1].get(key)
        if not isinstance(child, dict):
            return
        trail.append(child)
    trail[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):  # maps left empty go too
        if trail[depth]:
            break
        trail[depth - 1].pop(path[depth - 1], None)


def merge_patched(target: Any, patch: Any) -> Any:
    """RFC 7386: `patch` merged into `target` (null removes)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patched(out.get(key), value)
    return out


def fields_v1(paths: set[Path]) -> dict[str, Any]:
    """Field paths in the API's FieldsV1 notation."""
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        for key in path:
            name = (
                f"k:{json.dumps({key[0]: key[1]}, separators=(',', ':'))}"
                if isinstance(key, tuple)
                else f"f:{key}"
            )
            node = node.setdefault(name, {})
    return tree


def equality_selector(selector: str) -> dict[str, str]:
    """An equality label selector (`a=b,c==d`), the only kind the operator sends."""
    wanted: dict[str, str] = {}
    for term in filter(None, selector.split(",")):
        key, sep, value = term.partition("==") if "==" in term else term.partition("=")
        if not sep or "!" in key:
            raise NotImplementedError(f"label selector {selector!r}")
        wanted[key.strip()] = value.strip()
    return wanted
