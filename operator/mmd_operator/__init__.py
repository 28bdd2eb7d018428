"""The MultimodalDeployment operator: engine builds and Triton serving for multimodal models."""

__version__ = "0.1.0"
