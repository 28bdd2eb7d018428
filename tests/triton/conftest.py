"""The triton tier: real tritonserver processes (nvidia-pytriton wheel) on the rendered repositories.

Every test here is marked `triton`. A repository is rendered from an example exactly as `mmctl render`
does, written with Python-backend doubles in place of the GPU/serving-image models (`doubles.py`), and
started with the launch argv `plan.launch` computes (only the tritonserver path, repository and ports
differ). Servers are started once per example and module and stopped when the module is done; they are
bound to this process, so none outlives the session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from mmd_testbed.triton.localserver import TritonInstall, TritonNotInstalledError
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
