"""The MultimodalDeployment operator: serves multimodal models with TensorRT-LLM, from one resource.

A `MultimodalDeployment` names a model type and a runtime: `triton-trtllm-engine` (a GPU build Job makes
the TensorRT engines into a claim, keyed by their cacheKey; tritonserver pods serve them from a model
repository the operator renders into ConfigMaps) or `trtllm-serve` (a Job downloads the Hugging Face
snapshot once; TensorRT-LLM's PyTorch backend serves it with the OpenAI API). A replica is one pod, or a
LeaderWorkerSet group of pods when its world spans nodes. The operator keeps the serving workload, its
Service, NetworkPolicy and autoscaler, rolls revisions out (surge, in place, canary) and reports the
status. kopf feeds it the watch events. Its layers, from the bottom (docs/architecture.md):

- `knowledge`, `scaling_metrics`: what each model type needs on each runtime; the metrics it scales on;
- `api`: the CRD's models, their validation and the CRD generated from them;
- `config`, `facts`: the operator's settings; what it observed, as small frozen values;
- `plan`, `metrics`, `vocabulary`: a spec's plan; the Prometheus metrics; the names every layer shares;
- `judgement`, `election`: what one reconcile judges of what it observed; the rules of leader election;
- `kube`, `desired`, `status`, `plan_memory`: the API server; what to write; the status; plans per spec;
- `reconcile`: one reconcile: plan, observe, judge, decide, write, assess, report;
- `controller`, `leadership`: the work queue, its workers and the resync; the elector's thread;
- `handlers`, `main`: kopf's settings and watch streams; the process (logging, `/metrics`, election).
"""

__version__ = "0.1.0"
