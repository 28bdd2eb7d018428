"""What one reconcile judges of a resource's world, once, for the decision and the status alike.

- `judge`: the judgement (`Judgement`, `judge`) and what the decision rendered (`Rendered`);
- `artifact`: the rules every runtime's artifact follows (ready, its Job running, failed, blocked);
- `progress`: how far a running build or download is, from its last progress line, and whether it stalled;
- `token_secret`: a missing token Secret or key, in the kubelet's words about the Job's pod;
- `triton`: the triton-trtllm-engine runtime's artifact, the engine;
- `trtllm_serve`: the trtllm-serve runtime's artifact, the weights;
- `placement`: where a GPU pod may run and what keeps it off (also `mmctl validate --cluster`'s rule);
- `gpu_kinds`: the kinds of GPU (product, compute capability) a pod's placement reaches;
- `quotas`: which ResourceQuota refuses a pod the operator asked for, and by how much;
- `rollout`: whether a change surges or goes on in place, and why;
- `revisions`: the last revision whose every pod was ready, and when a new one is undone;
- `canary`: a Canary rollout's analysis of its new revision, promoted or rolled back;
- `availability`: whether serving is available, judged after the writes;
- `groups`: each group of a replica across pods, its pods ready and the ranks it lacks;
- `autoscaling`: what the HorizontalPodAutoscaler reports, in the spec's words;
- `node_silence`: nodes whose kubelet stopped renewing its Lease, and the serving pods to mark on them.

Pure: no I/O.
"""

from mmd_operator.judgement.judge import Judgement, Rendered, judge

__all__ = ["Judgement", "Rendered", "judge"]
