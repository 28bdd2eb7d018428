"""The house rules `make lint` checks (tools/lint): they hold for the repository, and they catch a breach."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tools.lint import house, runtime_branches, shape_branches


def test_the_repository_keeps_its_house_rules() -> None:
    assert house.oversized() == []
    assert house.misdocumented() == []
    assert house.outside_pointers() == []
    assert house.broken_links() == []
    assert house.stale_paths() == []
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


def test_a_path_named_in_prose_must_exist_wherever_the_prose_is(tmp_path: Path) -> None:
    for folder in ("docs", "scripts", "operator/mmd_operator/kube"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "docs" / "here.md").write_text("# here\n")
    (tmp_path / "scripts" / "check.sh").write_text("#!/bin/sh\n")
    (tmp_path / "operator" / "mmd_operator" / "kube" / "writes.py").write_text('"""Writes."""\n')
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    # What a run writes is no repository folder: a page may name what a command writes there.
    (tmp_path / "out" / "demo").mkdir(parents=True)
    files = {
        "Makefile": "# See docs/here.md and docs/install.md#images.\nx:\n\techo docs/not-prose.md\n",
        "scripts/run.sh": "#!/bin/sh\n# Like scripts/check.sh; docs/development/distributions.md says why.\n",
        "Dockerfile": "# docs/gone.md\nRUN cp docs/not-a-comment.md /x\n",
        "chart/values.yaml": "# Read by docs/values.md.\nkey: docs/not-a-comment.md\n",
        "chart/_helpers.tpl": "{{/* The rules, said in docs/rules.md. */}}\n",
        "tool.py": (
            '"""Reads scripts/check.sh and mmd_operator/kube/writes.py, not mmd_operator/kube/reads.py."""\n'
            "# A name after its module: mmd_operator/kube/writes.apply; a module gone: docs/gone.py\n"
            'PATH = "docs/in-code-is-not-prose.md"\n'
            "def f():\n"
            '    """Say docs/inner.md."""\n'
        ),
        "docs/page.md": (
            "See docs/here.md, `docs/nowhere.md`, https://example.com/docs/remote.md, out/docs/built.md,\n"
            "`docs/{a,b}.md`, `docs/*.md`, `docs/<page>.md`, out/rollouts/ and TensorRT-LLM's\n"
            "docs/source/models/supported-models.md.\n"
        ),
    }
    found = {name: house.missing_paths(name, text, tmp_path) for name, text in files.items()}
    assert found == {
        "Makefile": ["docs/install.md"],
        "scripts/run.sh": ["docs/development/distributions.md"],
        "Dockerfile": ["docs/gone.md"],
        "chart/values.yaml": ["docs/values.md"],
        "chart/_helpers.tpl": ["docs/rules.md"],
        "tool.py": ["docs/gone.py", "mmd_operator/kube/reads.py", "docs/inner.md"],
        "docs/page.md": ["docs/nowhere.md"],
    }


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
