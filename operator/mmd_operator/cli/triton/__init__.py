"""Triton adapter: parses model configs with Triton's protobuf and talks to tritonserver (tritonclient)."""
