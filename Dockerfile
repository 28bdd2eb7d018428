# syntax=docker/dockerfile:1
# Every image of the project from one build context. `make images` (tools/images.py) builds the real ones
# and the test bed (mmd_testbed.localcluster.images) the CPU stand-ins: each first fills wheelhouse/ with
# this repository's wheels and every dependency, so no stage that installs our packages reaches a package
# index for them. Targets:
#
#   operator             the operator (python -m mmd_operator), FROM PYTHON_IMAGE
#   engine-builder       the build Job's image: the NGC TensorRT-LLM image, the examples, VILA, this package
#   serving              the serving pods' image: the NGC image plus tensorrtllm_backend's model code
#   trtllm-serve         the trtllm-serve runtime's serving image: TensorRT-LLM's release image, as it is
#   engine-builder-cpu   CPU stand-ins of the three above for the local cluster's real pods (no GPU): the
#   serving-cpu          same paths, a CPU tritonserver, doubles of the GPU parts, the trtllm-serve double
#   trtllm-serve-cpu     (docs/development/real-pods.md)
#   release-cpu          another engine-path release's CPU stand-in, from the default's (see its stage)
#
#   make images REGISTRY=registry.example.com/ml PUSH=1     # the real images, engine path per release
#
# TRITON_TAG and TRTLLM_VERSION must match engine_builder/engine_builder/versions.py (SERVING_IMAGE,
# TRTLLM_VERSION), SERVE_TRTLLM_VERSION its SERVE_TRTLLM_VERSION; tests/engine_builder/test_dockerfile.py
# checks the defaults, the engine-builder and trtllm-serve stages check their base image's TensorRT-LLM.
# The engine path's other releases (versions.ENGINE_RELEASES) are built from the same stages with their
# row's TRITON_TAG, TRTLLM_VERSION, TEMPLATE_TAG, TEMPLATE_REPOSITORY and TEMPLATE_DIR (tools/images.py).
#
# Worlds across pods. A replica whose world is larger than `serving.gpusPerPod` runs as a LeaderWorkerSet
# group (operator/mmd_operator/desired/groups.py): the leader's bash script waits for its workers (getent,
# bash's /dev/tcp), then runs `mpirun` over ssh; each worker runs /usr/sbin/sshd on port 2222 as uid 1000.
# So both serving images must contain bash, getent, Open MPI's mpirun, ssh (openssh-client), sshd at
# /usr/sbin/sshd (openssh-server), and a passwd entry for uid 1000 with a login shell (ssh and sshd look the
# user up; sshd runs the remote orted with that shell); trtllm-serve's also mpi4py (its LLM API's MPI
# session) and `trtllm-llmapi-launch`. Every serving stage installs openssh where missing and checks the
# rest at build time. The real `serving` and `trtllm-serve` stages cannot be built on these development
# machines (the NGC images are not reachable from them): only the CPU stand-ins' checks have run here.

ARG PYTHON_IMAGE=python:3.11-slim
ARG TRITON_TAG=25.05
ARG TRTLLM_VERSION=0.19.0
ARG SERVING_BASE=nvcr.io/nvidia/tritonserver:${TRITON_TAG}-trtllm-python-py3
# The CPU serving stand-ins' base: Python 3 with its shared library, Open MPI, openssh and mpi4py (the local
# cluster's is a Debian root made by mmdebstrap; python:3.11-slim works too: the stages install what is
# missing, and add uid 1000).
ARG SERVING_CPU_BASE=python:3.11-slim
ARG MODEL_CODE_DIR=/opt/mmd-operator/all_models
# The trtllm-serve runtime: TensorRT-LLM's own release image (its `trtllm-serve` is the server).
ARG SERVE_TRTLLM_VERSION=1.2.1
ARG SERVE_BASE=nvcr.io/nvidia/tensorrt-llm/release:${SERVE_TRTLLM_VERSION}
# release-cpu's base: the default release's engine-builder-cpu or serving-cpu (the test bed passes its archive).
ARG RELEASE_CPU_BASE=scratch

# This repository's wheels and their dependencies, resolved on the build host (mounted, never copied).
FROM scratch AS wheelhouse
COPY wheelhouse/ /

# The operator: Python with the operator's distribution and its dependencies only, non-root.
# Settings come from MMD_* variables; /metrics on 8080, /healthz on 8081.
FROM ${PYTHON_IMAGE} AS operator
ENV PYTHONUNBUFFERED=1 HOME=/tmp
RUN --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    pip install --no-cache-dir --no-index --find-links /wheelhouse mmd-operator
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["python", "-m", "mmd_operator"]

# The serving pods' image: the pinned base image plus the Triton Python model code of the pinned
# tensorrtllm_backend tag (the NGC image ships the backends, not that code) and the InternLM-XComposer2
# fork's preprocessing, laid out as all_models/ under MODEL_CODE_DIR (engine_builder/versions.py).
FROM ${SERVING_BASE} AS serving
ARG TEMPLATE_TAG=v0.19.0
# 0.19.0's model code is tensorrtllm_backend's all_models/; from 1.x it is TensorRT-LLM's own
# triton_backend/all_models/ (each release's row in versions.py; tools/images.py passes them).
ARG TEMPLATE_REPOSITORY=triton-inference-server/tensorrtllm_backend
ARG TEMPLATE_DIR=all_models
ARG MODEL_CODE_DIR
ARG XCOMPOSER2_BACKEND_COMMIT=76a0d1f53335a9f08b6a750c278651458813948e
RUN command -v git || (apt-get update && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*)
RUN git clone --depth 1 --branch ${TEMPLATE_TAG} --filter=blob:none --sparse \
        https://github.com/${TEMPLATE_REPOSITORY}.git /tmp/backend \
    && git -C /tmp/backend sparse-checkout set ${TEMPLATE_DIR} \
    && mkdir -p $(dirname ${MODEL_CODE_DIR}) \
    && mv /tmp/backend/${TEMPLATE_DIR} ${MODEL_CODE_DIR} \
    && rm -rf /tmp/backend
ADD https://raw.githubusercontent.com/Howe-Young/tensorrtllm_backend/${XCOMPOSER2_BACKEND_COMMIT}/all_models/internlm_xcomposer2/preprocessing/1/model.py \
    ${MODEL_CODE_DIR}/internlm_xcomposer2/preprocessing/1/model.py
# Worlds across pods (see the top of this file): the NGC image has bash, getent, Open MPI (HPC-X) and its
# uid 1000 `triton-server`; openssh is added where missing, a nologin shell of uid 1000 becomes bash, and
# the build fails naming what is still missing.
RUN (command -v ssh && command -v /usr/sbin/sshd) >/dev/null || (apt-get update \
        && apt-get install -y --no-install-recommends openssh-client openssh-server \
        && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*)
RUN if getent passwd 1000 | grep -qE ':(/usr/sbin/nologin|/sbin/nologin|/bin/false)$'; then \
        usermod --shell /bin/bash "$(getent passwd 1000 | cut -d: -f1)"; fi
RUN for tool in bash getent mpirun ssh /usr/sbin/sshd; do command -v $tool >/dev/null \
        || { echo "serving: no $tool: a world across pods needs it (see the top of the Dockerfile)" >&2; exit 1; }; \
    done \
    && { getent passwd 1000 | grep -qvE ':(/usr/sbin/nologin|/sbin/nologin|/bin/false)?$' \
        || { echo "serving: uid 1000 needs a passwd entry with a login shell (ssh, sshd)" >&2; exit 1; }; }
# Non-root, as the pods' securityContext says: the base image's `triton-server` user (uid and gid 1000,
# no home directory, hence HOME for caches).
ENV HOME=/tmp
USER 1000:1000

# The trtllm-serve runtime's serving image: the pinned release image with nothing of ours, only the image
# contract checked and met (docs/trtllm-serve-runtime.md#the-image-contract): its TensorRT-LLM is the
# pinned one and `trtllm-serve` is on PATH (the build fails otherwise), uid and gid 1000 exist (Ubuntu
# 24.04 bases have `ubuntu` there; a user is added where none is) with a writable $HOME, port 8000. For
# worlds across pods (see the top of this file) openssh is added where missing, and bash, getent, mpirun,
# ssh, sshd, mpi4py, `trtllm-llmapi-launch` and uid 1000's login shell are checked.
FROM ${SERVE_BASE} AS trtllm-serve
ARG SERVE_TRTLLM_VERSION
RUN python3 -c "import importlib.metadata as m, sys; v = m.version('tensorrt_llm'); \
sys.exit(None if v == '${SERVE_TRTLLM_VERSION}' else f'base image has tensorrt_llm {v}, not ${SERVE_TRTLLM_VERSION}')" \
    && command -v trtllm-serve
RUN (getent group 1000 >/dev/null || groupadd --gid 1000 trtllm-serve) \
    && (getent passwd 1000 >/dev/null || useradd --uid 1000 --gid 1000 --no-create-home \
        --home-dir /home/trtllm-serve --shell /bin/bash trtllm-serve) \
    && install -d -o 1000 -g 1000 -m 0755 /home/trtllm-serve
RUN (command -v ssh && command -v /usr/sbin/sshd) >/dev/null || (apt-get update \
        && apt-get install -y --no-install-recommends openssh-client openssh-server \
        && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*)
RUN if getent passwd 1000 | grep -qE ':(/usr/sbin/nologin|/sbin/nologin|/bin/false)$'; then \
        usermod --shell /bin/bash "$(getent passwd 1000 | cut -d: -f1)"; fi
RUN for tool in bash getent mpirun ssh /usr/sbin/sshd trtllm-llmapi-launch; do command -v $tool >/dev/null \
        || { echo "trtllm-serve: no $tool: a world across pods needs it (see the top of the Dockerfile)" >&2; exit 1; }; \
    done \
    && { python3 -c "import mpi4py" || { echo "trtllm-serve: no mpi4py for the LLM API's MPI session" >&2; exit 1; }; } \
    && { getent passwd 1000 | grep -qvE ':(/usr/sbin/nologin|/sbin/nologin|/bin/false)?$' \
        || { echo "trtllm-serve: uid 1000 needs a passwd entry with a login shell (ssh, sshd)" >&2; exit 1; }; }
ENV HOME=/home/trtllm-serve
USER 1000:1000
EXPOSE 8000

# The build Job's image: the serving image itself (engines load only with the TensorRT-LLM they were built
# with), TensorRT-LLM's example scripts of the same tag, VILA's code, and the builder's distribution.
FROM ${SERVING_BASE} AS engine-builder
ARG TRTLLM_VERSION
# VILA's repository has no releases; pin a commit here for reproducible images.
ARG VILA_REF=main
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PYTHONUNBUFFERED=1 HF_HUB_DISABLE_TELEMETRY=1
RUN python3 -c "import importlib.metadata as m, sys; v = m.version('tensorrt_llm'); \
sys.exit(None if v == '${TRTLLM_VERSION}' else f'base image has tensorrt_llm {v}, not ${TRTLLM_VERSION}')"
RUN command -v git || (apt-get update && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*)
# Checkpoint converters, quantization/quantize.py, multimodal/build_multimodal_engine.py, hf_lora_convert.py.
RUN git clone --depth 1 --branch v${TRTLLM_VERSION} --filter=blob:none --sparse \
        https://github.com/NVIDIA/TensorRT-LLM.git /tmp/trtllm \
    && git -C /tmp/trtllm sparse-checkout set examples \
    && mkdir -p /opt/tensorrt_llm \
    && mv /tmp/trtllm/examples /opt/tensorrt_llm/examples \
    && rm -rf /tmp/trtllm
# build_multimodal_engine.py --model_type vila imports VILA's vision tower from --vila_path.
RUN git clone https://github.com/Efficient-Large-Model/VILA.git /opt/VILA \
    && git -C /opt/VILA checkout ${VILA_REF}
# InternLM-XComposer2's ViT plan comes from the fork recipe its serving code expects (visual_encoder.engine,
# tensors input/output); a commit in the URL pins the file's content.
ARG XCOMPOSER2_FORK_COMMIT=3d5cd357f458e242a34fae9df565bbcdcd6b5ba9
ADD https://raw.githubusercontent.com/Njuapp/TensorRT-LLM/${XCOMPOSER2_FORK_COMMIT}/examples/multimodal/build_visual_engine.py \
    /opt/internlm-xcomposer2/build_visual_engine.py
# Our wheel from the wheelhouse, named by its file: the index is asked only for the gpu extra's packages
# (huggingface_hub, openai-whisper) where the base image lacks them (tensorrt_llm and torch are the base
# image's own), never for our name, which this project has not registered there. No kopf, no kubernetes
# client: the builder imports nothing of the operator.
RUN --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    pip install --no-cache-dir --find-links /wheelhouse "$(ls /wheelhouse/mmd_engine_builder-*.whl)[gpu]"
ENV HOME=/tmp
USER 1000:1000
ENTRYPOINT ["python3", "-m", "engine_builder"]

# CPU stand-in of `serving`: the real CPU tritonserver of the nvidia-pytriton wheel at the NGC image's
# paths, a Python-based `tensorrtllm` backend and, under MODEL_CODE_DIR, one generic model for every
# model-code directory; each becomes, when loaded, the double of its model for the repository it was
# assembled into (mmd_testbed.triton.doubles.image), from the test bed's wheel. mpirun is Open MPI's, as in
# the NGC image; for worlds across pods (see the top of this file) the image has what `serving` must have,
# and mpi4py, with which the tensorrt_llm double joins its MPI world (Debian's python3-mpi4py in the local
# cluster's base, whose Python is Debian's; PyPI's binary wheel on another Python, such as python:3.11-slim).
# `nvidia-smi` lists the GPUs the local cluster's device plugin double gave the pod (FAKE_NVIDIA_GPUS),
# as the NVIDIA container toolkit's would (mmd_testbed.build_tools.nvidia_smi); the builder's and
# trtllm-serve's stand-ins have it too.
FROM ${SERVING_CPU_BASE} AS serving-cpu
ARG MODEL_CODE_DIR
ARG TRTLLM_VERSION
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PYTHONUNBUFFERED=1
RUN (command -v mpirun && command -v ssh && command -v /usr/sbin/sshd) >/dev/null || (apt-get update \
        && apt-get install -y --no-install-recommends openmpi-bin openssh-client openssh-server \
        && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*)
RUN --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    python3 -c "import mpi4py" 2>/dev/null \
    || pip install --no-cache-dir --no-index --find-links /wheelhouse "mpi4py>=4.1"
RUN (getent group 1000 >/dev/null || groupadd --gid 1000 triton-server) \
    && (getent passwd 1000 >/dev/null || useradd --uid 1000 --gid 1000 --no-create-home \
        --home-dir /tmp --shell /bin/bash triton-server)
RUN for tool in bash getent mpirun ssh /usr/sbin/sshd; do command -v $tool >/dev/null \
        || { echo "serving-cpu: no $tool: a world across pods needs it (see the top of the Dockerfile)" >&2; exit 1; }; \
    done \
    && python3 -c "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print(MPI.Get_library_version())" \
    && { getent passwd 1000 | grep -qvE ':(/usr/sbin/nologin|/sbin/nologin|/bin/false)?$' \
        || { echo "serving-cpu: uid 1000 needs a passwd entry with a login shell (ssh, sshd)" >&2; exit 1; }; }
# numpy 1.x: the Python backend stub reads numpy 1.x arrays only.
RUN --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    pip install --no-cache-dir --no-index --find-links /wheelhouse \
        "numpy<2" pillow protobuf \
    && pip install --no-cache-dir --no-index --find-links /wheelhouse --no-deps \
        mmd-operator mmd-engine-builder mmd-testbed \
    && pip install --no-cache-dir --no-index --find-links /wheelhouse --no-deps --target /opt/pytriton \
        nvidia-pytriton \
    && python3 -m mmd_testbed.triton.doubles.image install \
        --pytriton /opt/pytriton --prefix /opt/tritonserver --model-code-dir ${MODEL_CODE_DIR} \
    && printf '#!/bin/sh\nexec python3 -m mmd_testbed.build_tools.nvidia_smi "$@"\n' >/usr/local/bin/nvidia-smi \
    && chmod 0755 /usr/local/bin/nvidia-smi
# The release whose backend the doubles stand for (mmd_testbed.triton.doubles.repository.RELEASE_ENV).
ENV MMD_DOUBLE_TRTLLM_VERSION=${TRTLLM_VERSION}
ENV HOME=/tmp
USER 1000:1000

# CPU stand-in of `engine-builder`: the builder's distribution and, from the test bed's, doubles of the GPU
# tools at the real image's paths (trtllm-build, huggingface-cli, the example scripts, the XComposer2 recipe,
# `tensorrt`, openai-whisper's assets) and the Hub double. They parse the real tools' command lines and
# write small files of the real layout.
FROM ${PYTHON_IMAGE} AS engine-builder-cpu
ARG TRTLLM_VERSION
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PYTHONUNBUFFERED=1
# huggingface_hub: the weights download of the trtllm-serve runtime is the real one (against the local
# cluster's Hub double, which runs from this image too: python3 -m mmd_testbed.build_tools.hub).
RUN --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    pip install --no-cache-dir --no-index --find-links /wheelhouse pydantic "numpy<2" "huggingface_hub<1.0" \
    && pip install --no-cache-dir --no-index --find-links /wheelhouse --no-deps mmd-engine-builder mmd-testbed \
    && python3 -m mmd_testbed.build_tools.toolbox --bin /usr/local/bin \
        --examples /opt/tensorrt_llm/examples --pythonpath /opt/doubles/site \
        --xcomposer2 /opt/internlm-xcomposer2/build_visual_engine.py
# The doubles' tensorrt and whisper packages; the builder records the pinned TensorRT-LLM as assumed.
ENV PYTHONPATH=/opt/doubles/site ENGINE_BUILDER_ASSUME_TRTLLM_VERSION=${TRTLLM_VERSION}
ENV HOME=/tmp
USER 1000:1000
ENTRYPOINT ["python3", "-m", "engine_builder"]

# CPU stand-in of `trtllm-serve`: the trtllm-serve double (docs/development/trtllm-serve-double.md) behind a two-line
# `trtllm-serve` on PATH, under the same contract: the operator's argv unchanged, uid and gid 1000, a
# writable $HOME at /home/trtllm-serve, port 8000. It serves a snapshot's config.json, not a model. From the
# test bed's wheel, without the rest of the test bed's dependencies. For worlds across pods it is FROM the
# serving base (Open MPI, openssh, mpi4py) and has a two-line `trtllm-llmapi-launch`: rank 0 execs its
# arguments (`trtllm-serve ...`), the others the double's LLM API worker (mmd_testbed.trtllm_serve.launch).
FROM ${SERVING_CPU_BASE} AS trtllm-serve-cpu
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PYTHONUNBUFFERED=1
RUN (command -v mpirun && command -v ssh && command -v /usr/sbin/sshd) >/dev/null || (apt-get update \
        && apt-get install -y --no-install-recommends openmpi-bin openssh-client openssh-server \
        && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*)
RUN --mount=type=bind,from=wheelhouse,target=/wheelhouse \
    pip install --no-cache-dir --no-index --find-links /wheelhouse \
        pydantic pyyaml prometheus-client click pillow soundfile "numpy<2" \
    && (python3 -c "import mpi4py" 2>/dev/null \
        || pip install --no-cache-dir --no-index --find-links /wheelhouse "mpi4py>=4.1") \
    && pip install --no-cache-dir --no-index --find-links /wheelhouse --no-deps mmd-testbed \
    && printf '#!/bin/sh\nexec python3 -m mmd_testbed.trtllm_serve "$@"\n' >/usr/local/bin/trtllm-serve \
    && printf '#!/bin/sh\nexec python3 -m mmd_testbed.trtllm_serve.launch "$@"\n' >/usr/local/bin/trtllm-llmapi-launch \
    && printf '#!/bin/sh\nexec python3 -m mmd_testbed.build_tools.nvidia_smi "$@"\n' >/usr/local/bin/nvidia-smi \
    && chmod 0755 /usr/local/bin/trtllm-serve /usr/local/bin/trtllm-llmapi-launch /usr/local/bin/nvidia-smi \
    && (getent group 1000 >/dev/null || groupadd --gid 1000 trtllm-serve) \
    && (getent passwd 1000 >/dev/null || useradd --uid 1000 --gid 1000 --no-create-home \
        --home-dir /home/trtllm-serve --shell /bin/bash trtllm-serve) \
    && install -d -o 1000 -g 1000 -m 0755 /home/trtllm-serve
RUN for tool in bash getent mpirun ssh /usr/sbin/sshd trtllm-llmapi-launch; do command -v $tool >/dev/null \
        || { echo "trtllm-serve-cpu: no $tool: a world across pods needs it (see the top of the Dockerfile)" >&2; exit 1; }; \
    done \
    && python3 -c "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print(MPI.Get_library_version())" \
    && { getent passwd 1000 | grep -qvE ':(/usr/sbin/nologin|/sbin/nologin|/bin/false)?$' \
        || { echo "trtllm-serve-cpu: uid 1000 needs a passwd entry with a login shell (ssh, sshd)" >&2; exit 1; }; }
ENV HOME=/home/trtllm-serve
USER 1000:1000
EXPOSE 8000
ENTRYPOINT ["trtllm-serve"]

# CPU stand-in of another engine-path release's engine-builder or serving image: the default release's
# stand-in (RELEASE_CPU_BASE) with that release's version where the builder (what it records and the plans
# it accepts, where its example scripts lie) and the serving doubles (the backend they stand for) read it.
FROM ${RELEASE_CPU_BASE} AS release-cpu
ARG TRTLLM_VERSION
USER 0
# The builder's example scripts where this release keeps them (the serving stand-in has none).
RUN if [ -d /opt/tensorrt_llm/examples ]; then python3 -m mmd_testbed.build_tools.toolbox \
        --examples /opt/tensorrt_llm/examples --release ${TRTLLM_VERSION}; fi
USER 1000:1000
ENV ENGINE_BUILDER_ASSUME_TRTLLM_VERSION=${TRTLLM_VERSION} MMD_DOUBLE_TRTLLM_VERSION=${TRTLLM_VERSION}
