"""The MultimodalDeployment API: pydantic spec and status models, and the CRD generated from them."""
