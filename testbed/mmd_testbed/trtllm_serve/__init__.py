"""A double of TensorRT-LLM's `trtllm-serve` 1.2.1 (PyTorch backend): its CLI, endpoints and errors, no GPU.

It stands in for `trtllm-serve` in tests and in the CPU serving image of
the local cluster's real pods (`python -m mmd_testbed.trtllm_serve MODEL --backend pytorch ...`, or a
`trtllm-serve` shim in that image). What it mirrors, from which source, and where it differs:
docs/development/trtllm-serve-double.md.

- `facts`: the data file generated from TensorRT-LLM's sources (flags, LlmArgs fields, types, bounds,
  enums, validators, metric names);
- `cli`: the click command built from those facts; `config`: the `--config` YAML checked against them;
- `rules`: the cross-field rules of the LlmArgs validators the double checks, in the real words;
- `models`: the model directory and the multimodal architectures; `media`: decoding of content parts;
- `chat`: the OpenAI chat request, its content parts and the deterministic answer; `server`: the HTTP server;
- `launch` and `worker`: `trtllm-llmapi-launch` (rank 0 runs the server, the others the LLM API's MPI
  worker, which joins the world and waits for rank 0).
"""
