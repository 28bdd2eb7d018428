"""mmctl: the users' commands for MultimodalDeployment resources.

- `main`: the entry point; imports a sub-command's module only when that command runs;
- `documents`: reads YAML documents from files, directories and stdin;
- `render`, `validate`, `preflight`: what the operator would apply, and what it would refuse or warn of,
  offline or against a cluster (the base install);
- `migrate`: the trtllm-serve resource equivalent to an engine resource, or why there is none;
- `infer`, `eval_asr`: requests to a serving tritonserver (the `triton` and `asr` extras);
- `chat`: the OpenAI API of a trtllm-serve deployment (the `chat` extra);
- `triton`: the Triton client and request builder `infer` and `eval_asr` share;
- `reconnect`: `infer` and `chat` make a connection again that was never made (stdlib only).

It imports the operator's own code to plan exactly as the operator does; nothing in the operator imports it.
"""
