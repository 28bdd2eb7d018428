"""The triton tier: real tritonserver processes (nvidia-pytriton wheel) on the rendered repositories.

Every test here is marked `triton`. A repository is rendered from an example exactly as `mmctl render`
does, written with Python-backend doubles in place of the GPU/serving-image models (`doubles.py`), and
started with the launch argv `plan.launch` computes (only the tritonserver path, repository and ports
differ). Servers are started once per example and module and stopped when the module is done; they are
bound to this process, so none outlives the session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
import yaml

from mmd_operator.plan.triton import TritonPlan
from mmd_testbed.triton.localserver import TritonInstall, TritonNotInstalledError
from mmd_testbed.triton.serving import Served, serve
from tests.support.file_host import serving_directory
from tests.support.progress import terminal_printer
from tests.triton.serving import EXAMPLES

HERE = Path(__file__).parent
_ENGINE_RUNTIME = "triton-trtllm-engine"
# The engine runtime's examples: a trtllm-serve example has no Triton repository (testbed/tests/trtllm_serve).
EXAMPLE_NAMES = sorted(
    path.stem
    for path in EXAMPLES.glob("*.yaml")
    if yaml.safe_load(path.read_text())["spec"].get("runtime", _ENGINE_RUNTIME) == _ENGINE_RUNTIME
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.triton)


@pytest.fixture(scope="session")
def say(pytestconfig: pytest.Config) -> Callable[[str], None]:
    return terminal_printer(pytestconfig)


@pytest.fixture(scope="session")
def triton_install() -> TritonInstall:
    try:
        return TritonInstall.discover()
    except TritonNotInstalledError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="session")
def image_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A loopback HTTP server for image URLs: (base URL, directory it serves)."""
    root = tmp_path_factory.mktemp("images")
    with serving_directory(root) as base:
        yield base, root


# Serve a plan's repository under a name for the length of a `with` block.
Start = Callable[[str, TritonPlan], AbstractContextManager[Served]]


@pytest.fixture(scope="module")
def start(
    triton_install: TritonInstall, tmp_path_factory: pytest.TempPathFactory, say: Callable[[str], None]
) -> Start:
    """Serve a plan's repository for the length of a `with` block (a module's servers share a directory)."""

    def serving(name: str, plan: TritonPlan) -> AbstractContextManager[Served]:
        return serve(name, plan, triton_install, tmp_path_factory.mktemp("served"), say)

    return serving
