"""The version triple: base image, TensorRT-LLM version and template revision, pinned together.

Engines only load in a server built with the same TensorRT-LLM, and the rendered configs follow the
model-repository contract of one tensorrtllm_backend release. Changing one of these means changing all
three here, and nowhere else. Pure constants; imports nothing.
"""

from __future__ import annotations

# Triton release 25.05 ships TensorRT-LLM 0.19.0, the last tensorrtllm_backend release with all_models/.
TRTLLM_VERSION = "0.19.0"
BASE_IMAGE = "nvcr.io/nvidia/tritonserver:25.05-trtllm-python-py3"
TEMPLATE_REVISION = "tensorrtllm_backend v0.19.0"
TEMPLATE_TAG = "v0.19.0"

# Our build image: BASE_IMAGE plus this package and the TensorRT-LLM examples at the same tag.
BUILDER_IMAGE = f"ghcr.io/mmd-operator/engine-builder:0.1.0-trtllm{TRTLLM_VERSION}"
# Our serving image: BASE_IMAGE plus the Triton Python model code of TEMPLATE_TAG (the NGC image ships
# the backends, not the model code) under MODEL_CODE_DIR, laid out as tensorrtllm_backend's all_models/.
SERVING_IMAGE = f"ghcr.io/mmd-operator/serving:0.1.0-trtllm{TRTLLM_VERSION}"
MODEL_CODE_DIR = "/opt/mmd-operator/all_models"

# Where the builder image keeps TensorRT-LLM's example scripts (checkpoint converters and friends).
TRTLLM_EXAMPLES_DIR = "/opt/tensorrt_llm/examples"

# InternLM-XComposer2's vision engine comes from the recipe the reference workflow points at: the
# build_visual_engine.py of the fork its serving code was written for (branch dev/internlm-xcomposer2),
# pinned to one commit and fetched into the builder image at XCOMPOSER2_VISION_BUILDER. Its serving code
# (the preprocessing that runs that plan) comes from the backend fork at XCOMPOSER2_BACKEND_COMMIT.
XCOMPOSER2_FORK_REPOSITORY = "Njuapp/TensorRT-LLM"
XCOMPOSER2_FORK_COMMIT = "3d5cd357f458e242a34fae9df565bbcdcd6b5ba9"
XCOMPOSER2_VISION_BUILDER = "/opt/internlm-xcomposer2/build_visual_engine.py"
XCOMPOSER2_BACKEND_REPOSITORY = "Howe-Young/tensorrtllm_backend"
XCOMPOSER2_BACKEND_COMMIT = "76a0d1f53335a9f08b6a750c278651458813948e"

# The trtllm-serve runtime's triple, pinned together: TensorRT-LLM's release image, the TensorRT-LLM version
# it ships, and the version whose `trtllm-serve` command line and LlmArgs field names the generated
# `--config` YAML and argv follow (the facts the trtllm-serve double is built from,
# testbed/mmd_testbed/trtllm_serve/trtllm_serve_facts.json, which records its own pinned version).
SERVE_TRTLLM_VERSION = "1.2.1"
SERVE_BASE_IMAGE = f"nvcr.io/nvidia/tensorrt-llm/release:{SERVE_TRTLLM_VERSION}"
# Our serving image for it: SERVE_BASE_IMAGE with nothing of ours added but the image contract
# (docs/trtllm-serve-runtime.md#the-image-contract): `trtllm-serve` on the PATH, uid 1000.
TRTLLM_SERVE_IMAGE = f"ghcr.io/mmd-operator/trtllm-serve:0.1.0-trtllm{SERVE_TRTLLM_VERSION}"
