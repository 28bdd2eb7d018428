"""The MultimodalDeployment operator: engine builds and Triton serving for multimodal models."""
