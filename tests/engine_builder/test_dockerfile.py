"""The Dockerfile agrees with the pinned version triple and with the paths plans use (read, not built:
these machines have no container runtime)."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from engine_builder import versions
from mmd_operator.desired import pods
from mmd_operator.plan.launch import TRITONSERVER
from tests.engine_builder.conftest import REPO, rendered_plan
from tests.support.reference_workflow import flag_values


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    )
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
        for line in joined.splitlines()
        if line.strip()
    ]


def stages() -> tuple[dict[str, str], dict[str, list[tuple[str, str]]]]:
    """Global ARG defaults, and each named stage's instructions (its FROM first)."""
    defaults: dict[str, str] = {}
    named: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for instruction, args in instructions((REPO / "Dockerfile").read_text()):
        if instruction == "FROM":
            image, _, name = args.partition(" AS ")
            current = named.setdefault(name.strip(), [])
            current.append(("FROM", image.strip()))
        elif current is None:
            assert instruction == "ARG", f"{instruction} before the first FROM"
            key, _, value = args.partition("=")
            defaults[key] = value
        else:
            current.append((instruction, args))
    return defaults, named


def expand(text: str, values: dict[str, str]) -> str:
    """`text` with every `${NAME}` replaced, also inside replaced values."""
    while (expanded := re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], text)) != text:
        text = expanded
    return text


def test_the_engine_builder_image_is_the_pinned_serving_image_with_the_pinned_tensorrt_llm() -> None:
    defaults, named = stages()
    assert defaults["TRTLLM_VERSION"] == versions.TRTLLM_VERSION
    builder = named["engine-builder"]
    assert expand(builder[0][1], defaults) == versions.BASE_IMAGE
    assert versions.BUILDER_IMAGE.endswith(f"-trtllm{versions.TRTLLM_VERSION}")
    run = " ".join(args for instruction, args in builder if instruction == "RUN")
    # The image build itself fails when the base image's TensorRT-LLM is not the pinned one.
    assert "m.version('tensorrt_llm')" in run and "${TRTLLM_VERSION}" in run
    assert "--branch v${TRTLLM_VERSION}" in run
    assert f"mv /tmp/trtllm/examples {versions.TRTLLM_EXAMPLES_DIR}" in run
    vision = next(s for s in rendered_plan("vila")["steps"] if s["name"] == "build-vision-engine")
    assert f"VILA.git {flag_values(vision['argv'])['--vila_path']}" in run
    arguments = dict(
        args.partition("=")[::2] for instruction, args in builder if instruction == "ARG" and "=" in args
    )
    assert arguments["XCOMPOSER2_FORK_COMMIT"] == versions.XCOMPOSER2_FORK_COMMIT
    added = [expand(args, arguments).split() for instruction, args in builder if instruction == "ADD"]
    recipe = f"https://raw.githubusercontent.com/{versions.XCOMPOSER2_FORK_REPOSITORY}/"
    recipe += f"{versions.XCOMPOSER2_FORK_COMMIT}/examples/multimodal/build_visual_engine.py"
    assert [recipe, versions.XCOMPOSER2_VISION_BUILDER] in added
    # The builder's distribution with its GPU extra, and nothing of the operator's, mmctl's or the test bed's.
    # Named by its wheel's file, so that the index pip also reads is never asked for our name.
    assert '--find-links /wheelhouse "$(ls /wheelhouse/mmd_engine_builder-*.whl)[gpu]"' in run
    assert not any(name in run for name in ("mmd-operator", "mmctl", "mmd-testbed", "mmd_testbed"))
    assert builder[-1] == ("ENTRYPOINT", json.dumps(["python3", "-m", "engine_builder"]))


def _entrypoint_module(entrypoint: list[str]) -> str:
    """The module an ENTRYPOINT runs with `python -m` (or `python3 -m`)."""
    assert entrypoint[0] in ("python", "python3") and entrypoint[1] == "-m", entrypoint
    return entrypoint[2]


@pytest.mark.parametrize("stage", ["operator", "engine-builder", "engine-builder-cpu"])
def test_every_image_runs_a_module_that_exists_and_has_a_main(stage: str) -> None:
    _, named = stages()
    entrypoint = json.loads(next(args for instruction, args in named[stage] if instruction == "ENTRYPOINT"))
    module = _entrypoint_module(entrypoint)
    assert importlib.util.find_spec(module) is not None, (
        f"the {stage} image runs {module}, which does not exist"
    )
    main = importlib.util.find_spec(f"{module}.__main__")
    assert main is not None, f"{module} cannot be run with -m"


def test_the_operator_image_is_slim_python_running_the_operator_as_a_non_root_user() -> None:
    defaults, named = stages()
    operator = named["operator"]
    assert expand(operator[0][1], defaults).endswith("-slim")
    user = next(args for instruction, args in operator if instruction == "USER")
    assert user.split(":")[0] not in ("0", "root")
    entrypoint = json.loads(next(args for instruction, args in operator if instruction == "ENTRYPOINT"))
    assert entrypoint == ["python", "-m", "mmd_operator"]
    # The operator's distribution only (with the builder's formats): no extra, no mmctl, no test bed.
    run = " ".join(args for instruction, args in operator if instruction == "RUN")
    assert "--no-index --find-links /wheelhouse mmd-operator" in run and "[" not in run
    assert not any(name in run for name in ("mmctl", "mmd-testbed", "mmd_testbed"))


def test_the_serving_image_carries_the_model_code_where_the_operator_looks_for_it() -> None:
    defaults, named = stages()
    serving = named["serving"]
    assert expand(serving[0][1], defaults) == versions.BASE_IMAGE
    arguments = defaults | dict(
        args.partition("=")[::2] for instruction, args in serving if instruction == "ARG" and "=" in args
    )
    assert arguments["TEMPLATE_TAG"] == versions.TEMPLATE_TAG
    assert arguments["MODEL_CODE_DIR"] == versions.MODEL_CODE_DIR
    assert arguments["XCOMPOSER2_BACKEND_COMMIT"] == versions.XCOMPOSER2_BACKEND_COMMIT
    run = " ".join(expand(args, arguments) for instruction, args in serving if instruction == "RUN")
    assert (
        f"--branch {versions.TEMPLATE_TAG}" in run
        and f"mv /tmp/backend/all_models {versions.MODEL_CODE_DIR}" in run
    )
    added = [expand(args, arguments).split() for instruction, args in serving if instruction == "ADD"]
    assert added == [
        [
            f"https://raw.githubusercontent.com/{versions.XCOMPOSER2_BACKEND_REPOSITORY}/"
            f"{versions.XCOMPOSER2_BACKEND_COMMIT}/all_models/internlm_xcomposer2/preprocessing/1/model.py",
            f"{versions.MODEL_CODE_DIR}/internlm_xcomposer2/preprocessing/1/model.py",
        ]
    ]
    assert versions.SERVING_IMAGE.endswith(f"-trtllm{versions.TRTLLM_VERSION}")


def test_the_build_context_holds_the_wheelhouse_only() -> None:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    kept = sorted(line[1:].rstrip("/") for line in lines if line.startswith("!"))
    # The doubles the CPU stand-ins run come in the test bed's wheel: nothing under tests/ or testbed/.
    assert kept == ["wheelhouse"]
    assert not any("tests/" in line or "testbed/" in line for line in lines)
    assert "*" in lines
    _, named = stages()
    copied = {
        path.rstrip("/")
        for stage in named.values()
        for instruction, args in stage
        if instruction == "COPY" and not args.startswith("--from")
        for path in args.split()[:-1]
    }
    assert copied == {"wheelhouse"}
    # Package installs read the wheelhouse through a mount, so it never becomes a layer of an image.
    assert named["wheelhouse"] == [("FROM", "scratch"), ("COPY", "wheelhouse/ /")]


def test_the_cpu_stand_ins_keep_the_real_images_paths() -> None:
    defaults, named = stages()
    serving = " ".join(
        expand(args, defaults) for instruction, args in named["serving-cpu"] if instruction == "RUN"
    )
    assert f"--prefix {TRITONSERVER.removesuffix('/bin/tritonserver')}" in serving
    assert f"--model-code-dir {versions.MODEL_CODE_DIR}" in serving
    assert defaults["MODEL_CODE_DIR"] == versions.MODEL_CODE_DIR
    builder = " ".join(args for instruction, args in named["engine-builder-cpu"] if instruction == "RUN")
    assert f"--examples {versions.TRTLLM_EXAMPLES_DIR}" in builder
    assert f"--xcomposer2 {versions.XCOMPOSER2_VISION_BUILDER}" in builder


@pytest.mark.parametrize("stage", ["serving", "engine-builder", "serving-cpu", "engine-builder-cpu"])
def test_the_gpu_images_run_as_the_user_the_pods_require(stage: str) -> None:
    _, named = stages()
    users = [args for instruction, args in named[stage] if instruction == "USER"]
    # The pods' runAsUser decides, but an image whose last USER differs would fail where it writes.
    assert users[-1] == f"{pods.IMAGE_UID}:{pods.IMAGE_UID}"
    assert ("ENV", "HOME=/tmp") in named[stage]
    assert pods.pod_security_context()["runAsUser"] == pods.IMAGE_UID


def test_the_trtllm_serve_image_is_the_pinned_release_image_checked_against_the_contract() -> None:
    defaults, named = stages()
    assert defaults["SERVE_TRTLLM_VERSION"] == versions.SERVE_TRTLLM_VERSION
    serve = named["trtllm-serve"]
    assert (
        expand(serve[0][1], defaults)
        == versions.SERVE_BASE_IMAGE
        == "nvcr.io/nvidia/tensorrt-llm/release:1.2.1"
    )
    assert versions.TRTLLM_SERVE_IMAGE.endswith(f"-trtllm{versions.SERVE_TRTLLM_VERSION}")
    run = " ".join(args for instruction, args in serve if instruction == "RUN")
    # The build fails unless the base image ships the pinned TensorRT-LLM and its trtllm-serve.
    assert "m.version('tensorrt_llm')" in run and "${SERVE_TRTLLM_VERSION}" in run
    assert "command -v trtllm-serve" in run
    # Nothing of ours is installed: the release image's own server runs.
    assert "wheelhouse" not in run and not [i for i, _ in serve if i in ("COPY", "ADD")]


@pytest.mark.parametrize("stage", ["trtllm-serve", "trtllm-serve-cpu"])
def test_the_trtllm_serve_images_meet_the_image_contract(stage: str) -> None:
    from mmd_operator.desired.trtllm_serve import HOME
    from mmd_operator.plan.launch import HTTP_PORT

    _, named = stages()
    instructions_of = named[stage]
    assert [args for instruction, args in instructions_of if instruction == "USER"][-1] == (
        f"{pods.IMAGE_UID}:{pods.IMAGE_UID}"
    )
    assert ("ENV", f"HOME={HOME}") in instructions_of
    assert ("EXPOSE", str(HTTP_PORT)) in instructions_of
    run = " ".join(args for instruction, args in instructions_of if instruction == "RUN")
    assert f"install -d -o {pods.IMAGE_UID} -g {pods.IMAGE_UID} -m 0755 {HOME}" in run


def test_the_cpu_trtllm_serve_runs_the_double_as_trtllm_serve_on_the_path() -> None:
    _, named = stages()
    serve = named["trtllm-serve-cpu"]
    run = " ".join(args for instruction, args in serve if instruction == "RUN")
    shim = "printf '#!/bin/sh\\nexec python3 -m mmd_testbed.trtllm_serve \"$@\"\\n' "
    shim += ">/usr/local/bin/trtllm-serve"
    assert shim in run and "chmod 0755 /usr/local/bin/trtllm-serve" in run
    assert importlib.util.find_spec("mmd_testbed.trtllm_serve.__main__") is not None
    # The double's own imports, from the wheelhouse (the package itself is installed without dependencies).
    for package in ("pydantic", "pyyaml", "prometheus-client", "click", "pillow", "soundfile"):
        assert f" {package} " in run
    assert serve[-1] == ("ENTRYPOINT", json.dumps(["trtllm-serve"]))


# What every serving image needs for a world across pods (Dockerfile, top): the leader's script (bash,
# getent), mpirun over ssh, the workers' sshd; trtllm-serve's also mpi4py and the LLM API's launcher.
_WORLD_TOOLS = ("bash", "getent", "mpirun", "ssh", "/usr/sbin/sshd")


@pytest.mark.parametrize("stage", ["serving", "trtllm-serve", "serving-cpu", "trtllm-serve-cpu"])
def test_the_serving_images_hold_and_check_what_a_world_across_pods_needs(stage: str) -> None:
    from mmd_operator.desired import groups
    from mmd_operator.plan.launch import Segment
    from mmd_operator.plan.trtllm_serve import LLMAPI_LAUNCH

    # What the LeaderWorkerSet's pods run with these images.
    leader = groups.leader_script([Segment(1, ("serve",))], gpus_per_pod=1, rank_env=())
    assert "getent hosts" in leader and "/dev/tcp/" in leader and "exec mpirun " in leader
    run = groups.SSH_RUN
    assert f"exec /usr/sbin/sshd -D -E {run}/sshd.log -f {run}/sshd_config" in groups.worker_script()
    assert f"ssh -F {groups.SSH_RUN}/config" in groups.mpi_environment().values()
    _, named = stages()
    run = " ".join(args for instruction, args in named[stage] if instruction == "RUN")
    # openssh where the base lacks it, as the serving stage installs git.
    assert "command -v ssh && command -v /usr/sbin/sshd) >/dev/null ||" in run
    assert "--no-install-recommends openssh-client openssh-server" in run or (
        "--no-install-recommends openmpi-bin openssh-client openssh-server" in run
    )
    assert "/etc/ssh/ssh_host_*" in run  # no host key baked in: a worker uses its group's
    # The build fails, naming what is missing.
    serve = stage.startswith("trtllm-serve")
    tools = (*_WORLD_TOOLS, *([LLMAPI_LAUNCH] if serve else []))
    assert f"for tool in {' '.join(tools)}; do command -v $tool >/dev/null" in run
    assert f'echo "{stage}: no $tool: a world across pods needs it' in run
    # uid 1000 (the pods' user, which ssh and sshd look up) with a login shell: sshd runs orted with it.
    assert (
        f"getent passwd {pods.IMAGE_UID} | grep -qvE ':(/usr/sbin/nologin|/sbin/nologin|/bin/false)?$'" in run
    )
    assert f'echo "{stage}: uid {pods.IMAGE_UID} needs a passwd entry with a login shell' in run
    # mpi4py: the LLM API's MPI session (trtllm-serve), the doubles' world (the CPU stand-ins).
    assert ("import mpi4py" in run) is (serve or stage.endswith("-cpu"))


def test_the_cpu_trtllm_serve_has_the_llmapi_launcher_a_group_runs() -> None:
    from mmd_operator.plan.trtllm_serve import LLMAPI_LAUNCH
    from mmd_testbed.trtllm_serve.launch import WORKER_MODULE

    _, named = stages()
    serve = named["trtllm-serve-cpu"]
    # Open MPI, openssh and mpi4py come with the serving base, as in serving-cpu.
    assert serve[0] == ("FROM", "${SERVING_CPU_BASE}") == named["serving-cpu"][0]
    run = " ".join(args for instruction, args in serve if instruction == "RUN")
    shim = "printf '#!/bin/sh\\nexec python3 -m mmd_testbed.trtllm_serve.launch \"$@\"\\n' "
    assert f"{shim}>/usr/local/bin/{LLMAPI_LAUNCH}" in run and f"/usr/local/bin/{LLMAPI_LAUNCH}" in run
    assert importlib.util.find_spec("mmd_testbed.trtllm_serve.launch") is not None
    assert importlib.util.find_spec(WORKER_MODULE) is not None
    # Where the base lacks mpi4py (python:3.11-slim), PyPI's wheel from the wheelhouse.
    assert '|| pip install --no-cache-dir --no-index --find-links /wheelhouse "mpi4py>=4.1"' in run
