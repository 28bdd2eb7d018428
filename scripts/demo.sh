#!/usr/bin/env bash
# `make demo`: the operator's main job on the local control plane, as far as it exists today.
#
# Starts the local Kubernetes control plane (building it on first use), shows what the operator derives
# for every example (limits, cacheKey, model repository, build plan, launch argv), installs the CRD and
# applies every example to the real API server, whose CEL rules refuse what cannot work.
set -euo pipefail
cd "$(dirname "$0")/.."

mmctl=.venv/bin/mmctl
namespace=mmd-demo
out=out/demo
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "Local control plane (the first run builds it from the Go module proxy)"
"$mmctl" cluster up
eval "$("$mmctl" cluster kubeconfig --shell)"
kubectl version
kubectl get nodes -o custom-columns='NODE:.metadata.name,GPUS:.status.allocatable.nvidia\.com/gpu,PRODUCT:.metadata.labels.nvidia\.com/gpu\.product,READY:.status.conditions[?(@.type=="Ready")].status'

step "What the operator derives for each example (offline: mmctl validate)"
for example in examples/*.yaml; do
  "$mmctl" validate -f "$example"
done

step "Everything for LLaVA on 2 GPUs with an FP8 KV cache (mmctl render -o $out/llava-tp2-fp8)"
"$mmctl" render -f examples/llava-tp2-fp8.yaml -o "$out/llava-tp2-fp8"
python3 - "$out/llava-tp2-fp8" <<'PY'
import json, sys
out = sys.argv[1]
plan = json.load(open(f"{out}/build_plan.json"))
print(f"build plan for cacheKey {plan['cache_key']} (TensorRT-LLM {plan['trtllm_version']}):")
for number, step in enumerate(plan["steps"], 1):
    print(f"  {number}. {step['name']}: {' '.join(step['argv'])}")
launch = json.load(open(f"{out}/launch.json"))
print(f"launch ({launch['world_size']} ranks): {' '.join(launch['argv'])}")
PY

step "Installing the CRD (server-side apply) and asking kubectl to explain it"
kubectl apply --server-side -f crds/
kubectl wait --for=condition=Established --timeout=60s crd/multimodaldeployments.serving.multimodal.dev
# The API server publishes a new CRD's schema to discovery and OpenAPI a moment after it is Established.
for _ in $(seq 30); do
  kubectl explain mmd.spec.engine.maxMultimodalLen 2>/dev/null && break
  sleep 1
done

step "Applying every example to namespace $namespace"
kubectl create namespace "$namespace" --dry-run=client -o yaml | kubectl apply -f -
kubectl apply --server-side -n "$namespace" -f examples/
kubectl get mmd -n "$namespace"

step "The API server refuses a resource that cannot work, naming the field and the rule"
if kubectl apply --dry-run=server -n "$namespace" -f - <<'YAML'
apiVersion: serving.multimodal.dev/v1alpha1
kind: MultimodalDeployment
metadata:
  name: broken
spec:
  model:
    type: llava
    source:
      huggingface: {repo: llava-hf/llava-1.5-7b-hf}
      pvc: {claimName: models}
  engine:
    maxImagesPerRequest: 4
  serving:
    crossKvCacheFraction: 0.5
YAML
then
  echo "unexpected: the broken resource was accepted" >&2
  exit 1
fi

step "Done. The cluster keeps running: 'make cluster-down' stops it; 'eval \$(.venv/bin/mmctl cluster kubeconfig --shell)' points kubectl at it"
