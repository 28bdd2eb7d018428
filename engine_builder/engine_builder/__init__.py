"""The builder image's program, run by the operator's Jobs, and the formats the operator reads of it.

Two Jobs run `python -m engine_builder`: the triton-trtllm-engine runtime's build runs a build plan
(convert the checkpoint, build every rank's engine and the vision engine; a world across pods is built in
one pod, that many ranks at a time) and writes the engines into the cache atomically, under their
cacheKey; the trtllm-serve runtime's download puts a Hugging Face snapshot into the cache, once. Both
print a progress line while they run and report in one protocol. pydantic only (the `download` and `gpu`
extras add the rest); it imports nothing from the operator, kopf or kubernetes.

- `job_report`, `plan_format`, `result_format`, `weights_format`, `progress_format`, `versions`: the
  formats, the only modules the operator imports: the Jobs' report, their plans and results, the pins;
- `plan_runner`, `steps`, `probe`: a build: its plan run step by step, our own steps, the image's probes;
- `weights`: a download of one Hugging Face snapshot;
- `progress`: a running Job's progress, measured and printed.
"""
