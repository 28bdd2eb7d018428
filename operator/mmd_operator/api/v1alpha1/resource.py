"""The resource as a whole: its group, version, kind and names at the API server, and its model.

Pure: imports pydantic and the package's `schema`, `spec` and `status`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from mmd_operator.api.v1alpha1.schema import Schema
from mmd_operator.api.v1alpha1.spec import MultimodalDeploymentSpec
from mmd_operator.api.v1alpha1.status import MultimodalDeploymentStatus

GROUP = "serving.multimodal.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MultimodalDeployment"
PLURAL = "multimodaldeployments"
SINGULAR = "multimodaldeployment"
SHORT_NAMES = ("mmd",)
# Longest resource name: `<name>-repo-<10 hex>` and pod names derived from `<name>` must stay valid.
MAX_NAME_LENGTH = 48


class MultimodalDeployment(Schema):
    """A vision-language or speech model built with TensorRT-LLM and served by Triton Inference Server."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["serving.multimodal.dev/v1alpha1"] = "serving.multimodal.dev/v1alpha1"
    """API version."""
    kind: Literal["MultimodalDeployment"] = "MultimodalDeployment"
    """Kind."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Standard object metadata."""
    spec: MultimodalDeploymentSpec
    """Desired state."""
    status: MultimodalDeploymentStatus | None = None
    """Observed state."""
