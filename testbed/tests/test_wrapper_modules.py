"""Every binary the test bed builds names a package its wrapper module can build: the wrapper itself or
a module it requires. A warm cache hides a wrong path, so a cold machine was the first to find one."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from mmd_testbed.localcluster import fakegpu
from mmd_testbed.localcluster.binaries import BinarySpec, binary_specs
from mmd_testbed.localcluster.fakegpu import fake_gpu_specs
from mmd_testbed.localcluster.layout import Layout, find_repo_root
from mmd_testbed.localcluster.lwsbinaries import lws_binary_specs
from mmd_testbed.localcluster.metricsbinaries import metrics_binary_specs
from mmd_testbed.localcluster.nodebinaries import node_binary_specs

_REQUIRE_LINE = re.compile(r"^\s*(?:require\s+)?([\w.\-/~]+)\s+v\S+", re.MULTILINE)


def _modules(go_mod: Path) -> tuple[str, set[str]]:
    text = go_mod.read_text()
    own = re.search(r"^module\s+(\S+)", text, re.MULTILINE)
    assert own, f"{go_mod} names no module"
    return own.group(1), set(_REQUIRE_LINE.findall(text))


def _layout(tmp_path: Path) -> Layout:
    return Layout(repo_root=find_repo_root(), cache_root=tmp_path / "cache")


_RECIPES: dict[str, Callable[[Layout], tuple[list[BinarySpec], Callable[[str], Path]]]] = {
    "control plane": lambda layout: (
        binary_specs(layout.versions, "0" * 40, "1970-01-01T00:00:00Z"),
        layout.wrapper_dir,
    ),
    "nodes": lambda layout: (
        node_binary_specs(layout.node_versions, "0" * 40, "1970-01-01T00:00:00Z"),
        layout.node_wrapper_dir,
    ),
    "metrics": lambda layout: (
        metrics_binary_specs(layout.metrics_versions, "0" * 40),
        layout.metrics_wrapper_dir,
    ),
    "fake GPU plugin": lambda layout: (fake_gpu_specs(), lambda _wrapper: fakegpu.source_dir(layout)),
    "lws": lambda layout: (
        lws_binary_specs(layout.lws_versions, "0" * 40, "1970-01-01T00:00:00Z"),
        lambda _wrapper: layout.lws_wrapper_dir,
    ),
}


@pytest.mark.parametrize("recipe", sorted(_RECIPES))
def test_each_package_belongs_to_its_wrapper_module(recipe: str, tmp_path: Path) -> None:
    specs, wrapper_dir = _RECIPES[recipe](_layout(tmp_path))
    assert specs
    for spec in specs:
        own, required = _modules(wrapper_dir(spec.wrapper) / "go.mod")
        owners = {own, *required}
        assert any(spec.package == owner or spec.package.startswith(f"{owner}/") for owner in owners), (
            f"{spec.name}: package {spec.package} is neither wrapper module {own} "
            f"nor under a module it requires"
        )


def test_wrapper_modules_are_named_after_their_folders() -> None:
    root = find_repo_root()
    wrappers = [*(root / "testbed" / "go").glob("*/*/go.mod"), root / "testbed" / "go" / "lws" / "go.mod"]
    for go_mod in sorted(wrappers):
        own, _ = _modules(go_mod)
        assert own == f"mmd-operator/{go_mod.parent.relative_to(root).as_posix()}", go_mod
