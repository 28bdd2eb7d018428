"""The Triton side of `mmctl infer` and `mmctl eval-asr` (the `triton` extra).

- `client`: talks to a serving tritonserver over HTTP or gRPC;
- `requests`: builds the input tensors of one request for a model type.
"""
