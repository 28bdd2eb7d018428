# syntax=docker/dockerfile:1
# Three images from one build context:
#   docker build --target operator       -t ghcr.io/mmd-operator/operator:0.1.0 .
#   docker build --target engine-builder -t ghcr.io/mmd-operator/engine-builder:0.1.0-trtllm0.19.0 .
#   docker build --target serving        -t ghcr.io/mmd-operator/serving:0.1.0-trtllm0.19.0 .
# TRITON_TAG and TRTLLM_VERSION must match engine_builder/engine_builder/versions.py (SERVING_IMAGE,
# TRTLLM_VERSION); tests/engine_builder/test_dockerfile.py checks the defaults, the engine-builder stage
# checks the base image's TensorRT-LLM.

ARG PYTHON_IMAGE=python:3.11-slim
ARG TRITON_TAG=25.05
ARG TRTLLM_VERSION=0.19.0

# This repository as one wheel (operator and engine builder), built once for both images.
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY engine_builder/ engine_builder/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

# The operator: slim Python with the runtime dependencies only (no cli extra), non-root.
# Settings come from MMD_* variables; /metrics on 8080, /healthz on 8081.
FROM ${PYTHON_IMAGE} AS operator
ENV PYTHONUNBUFFERED=1 HOME=/tmp
COPY --from=wheel /dist/ /dist/
RUN pip install --no-cache-dir /dist/*.whl && rm -rf /dist
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["python", "-m", "mmd_operator"]

# The serving pods' image: the pinned base image plus the Triton Python model code of the pinned
# tensorrtllm_backend tag (the NGC image ships the backends, not that code) and the InternLM-XComposer2
# fork's preprocessing, laid out as all_models/ under MODEL_CODE_DIR (engine_builder/versions.py).
FROM nvcr.io/nvidia/tritonserver:${TRITON_TAG}-trtllm-python-py3 AS serving
ARG TEMPLATE_TAG=v0.19.0
ARG MODEL_CODE_DIR=/opt/mmd-operator/all_models
ARG XCOMPOSER2_BACKEND_COMMIT=76a0d1f53335a9f08b6a750c278651458813948e
RUN command -v git || (apt-get update && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*)
RUN git clone --depth 1 --branch ${TEMPLATE_TAG} --filter=blob:none --sparse \
        https://github.com/triton-inference-server/tensorrtllm_backend.git /tmp/backend \
    && git -C /tmp/backend sparse-checkout set all_models \
    && mkdir -p $(dirname ${MODEL_CODE_DIR}) \
    && mv /tmp/backend/all_models ${MODEL_CODE_DIR} \
    && rm -rf /tmp/backend
ADD https://raw.githubusercontent.com/Howe-Young/tensorrtllm_backend/${XCOMPOSER2_BACKEND_COMMIT}/all_models/internlm_xcomposer2/preprocessing/1/model.py \
    ${MODEL_CODE_DIR}/internlm_xcomposer2/preprocessing/1/model.py
# Non-root, as the pods' securityContext says: the base image's `triton-server` user (uid and gid 1000,
# no home directory, hence HOME for caches).
ENV HOME=/tmp
USER 1000:1000

# The build Job's image: the serving image itself (engines load only with the TensorRT-LLM they were built
# with), TensorRT-LLM's example scripts of the same tag, VILA's code, and this package.
FROM nvcr.io/nvidia/tritonserver:${TRITON_TAG}-trtllm-python-py3 AS engine-builder
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
COPY --from=wheel /dist/ /dist/
RUN pip install --no-cache-dir "$(ls /dist/*.whl)[builder]" && rm -rf /dist
ENV HOME=/tmp
USER 1000:1000
ENTRYPOINT ["python3", "-m", "engine_builder"]
