"""The house rules `make lint` checks (tools/lint): they hold for the repository, and they catch a breach."""

from __future__ import annotations

from pathlib import Path

from tools.lint import house, runtime_branches, shape_branches


def test_the_repository_keeps_its_house_rules() -> None:
    assert house.oversized() == []
    assert house.misdocumented() == []
    assert house.outside_pointers() == []
    assert house.broken_links() == []
    assert house.index_names() == []
    assert len(runtime_branches.branches()) <= runtime_branches.LIMIT
    assert len(shape_branches.branches()) <= shape_branches.LIMIT


def test_a_package_docstring_must_list_exactly_its_modules(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "__init__.py").write_text('"""Sub."""\n')
    (package / "alpha.py").write_text('"""Alpha."""\n')
    (package / "__init__.py").write_text(
        '"""Pkg.\n\n- `alpha`, `beta`: two modules;\n- `sub`: a package.\n"""\n'
    )
    assert house.listed_modules(package / "__init__.py") == {"alpha", "beta", "sub"}
    assert house.package_modules(package) == {"alpha", "sub"}


def test_a_test_naming_the_runtime_counts_and_a_table_does_not(tmp_path: Path) -> None:
    package = tmp_path / "operator" / "mmd_operator"
    package.mkdir(parents=True)
    (package / "a.py").write_text(
        "TABLE = {Runtime.TRTLLM_SERVE: 1}\n"
        "def f(plan):\n"
        "    if isinstance(plan, TrtllmServePlan):\n"
        "        return [x for x in y if x.serve]\n"
        "    return TABLE[plan.runtime]\n"
    )
    assert runtime_branches.branches(tmp_path) == [
        ("operator/mmd_operator/a.py", 3),
        ("operator/mmd_operator/a.py", 4),
    ]


def test_an_install_hint_that_asks_an_index_for_one_of_our_names_is_a_breach() -> None:
    # Written with INSTALL for the command, so that this file itself keeps the rule.
    text = """
    INSTALL 'mmctl[all]'
    $ pip3 INSTALL3 mmd_operator==0.1.0 && mmctl validate -f x.yaml
    RUN INSTALL --no-cache-dir --find-links /wheelhouse \\
        "MMD-Engine-Builder[gpu]"
    `INSTALL ./engine_builder ./operator './cli[chat]'` in a checkout
    RUN INSTALL --no-index --find-links /wheelhouse mmd-operator
    video needs PyAV (INSTALL av)
    """.replace("INSTALL3", "install").replace("INSTALL", "pip install")
    assert house.index_installs(text) == [
        "'mmctl[all]'",
        "mmd_operator==0.1.0",
        '--no-cache-dir --find-links /wheelhouse "MMD-Engine-Builder[gpu]"',
    ]


def test_a_test_naming_the_shape_counts_and_a_table_does_not(tmp_path: Path) -> None:
    package = tmp_path / "operator" / "mmd_operator"
    (package / "api" / "v1alpha1").mkdir(parents=True)
    (package / "a.py").write_text(
        "TABLE = {ReplicaShape.GROUP: 1}\n"
        "def f(spec, manifest, tensor):\n"
        "    if spec.parallelism.spans_pods:\n"
        "        return 1 if spec.parallelism.pods_per_replica > 1 else 2\n"
        "    assert manifest['kind'] == kinds.LEADER_WORKER_SET.kind\n"
        "    shape = tensor.dims\n"
        "    if shape == (1, 2) or tensor.size:\n"  # a local `shape` is not the replica's
        "        return [p for p in spec.pods if p.shape is ReplicaShape.ONE_POD]\n"
        "    return TABLE[spec.parallelism.shape]\n"
    )
    # The decision itself may ask.
    (package / "api" / "v1alpha1" / "parallelism.py").write_text(
        "def shape(self):\n    return GROUP if self.pods_per_replica > 1 else ONE_POD\n"
    )
    assert shape_branches.branches(tmp_path) == [
        ("operator/mmd_operator/a.py", 3),
        ("operator/mmd_operator/a.py", 4),
        ("operator/mmd_operator/a.py", 5),
        ("operator/mmd_operator/a.py", 8),
    ]
