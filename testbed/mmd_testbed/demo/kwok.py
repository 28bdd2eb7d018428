"""The demo on kwok's simulated GPU nodes, where this machine cannot run real nodes (or with `--kwok`).

It starts (or reuses) the local control plane, installs the CRD, runs the operator, applies three
examples and follows them from Building through Deploying to Ready, then shows a cache hit, a failed
build with the builder's reason and a serving-only change that rolls without a build. Last, it serves the
llava resource's model repository, exactly as its ConfigMap holds it, on the local CPU tritonserver and
answers one `mmctl infer` request. What is simulated is said as it happens.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import tempfile
import time
from pathlib import Path

from engine_builder.result_format import BuildFailed, termination_message
from mmd_operator.plan.model_repository import ModelRepository
from mmd_operator.plan.resource_plan import plan_resource, plan_spec
from mmd_operator.plan.triton import TritonPlan
from mmd_operator.status import previous_status, recorded_kind
from mmd_testbed.demo.common import (
    GROUP,
    LLAVA_STREAM,
    NAMESPACE,
    ROOT,
    STARTED,
    VERSION,
    Demo,
    ask,
    example,
    leave_cluster,
    operator,
    operator_figures,
    ready,
    say,
    step,
    tp2_on_a100s,
)
from mmd_testbed.localcluster.cluster import LocalCluster
from mmd_testbed.localcluster.layout import default_state_dir
from mmd_testbed.localcluster.stages import (
    FAULT_LABEL,
    FAULT_MESSAGE_ANNOTATION,
)
from mmd_testbed.ports import free_port
from mmd_testbed.triton import media
from mmd_testbed.triton.localserver import TritonInstall
from mmd_testbed.triton.serving import serve


def kwok_demo(args: argparse.Namespace) -> int:
    """The demo on the control plane with kwok's simulated GPU nodes; returns the exit code."""
    out = ROOT / "out" / "demo"
    out.mkdir(parents=True, exist_ok=True)

    say("What is real and what is simulated here:")
    say("  real: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the operator, tritonserver")
    say("  simulated: the four GPU nodes (kwok), every pod's life (kwok marks them Running/Ready), and the")
    say("  engine build itself: a build pod ends after a few seconds with the builder's own success line for")
    say("  its cacheKey (no GPU, no TensorRT-LLM here); at the end the model code on tritonserver is doubles")

    step("Local control plane (the first run builds it from the Go module proxy, about 12 minutes)")
    cluster = LocalCluster(default_state_dir(ROOT), say=say)
    was_running = cluster.load_state() is not None
    state = cluster.up()
    kubectl = Path(state.binaries) / "bin" / "kubectl"
    with cluster.api_client() as api:
        demo = Demo(cluster, api, kubectl, out)
        demo.run_kubectl(
            "get",
            "nodes",
            "-o",
            "custom-columns=NODE:.metadata.name,GPUS:.status.allocatable.nvidia\\.com/gpu,PRODUCT:.metadata.labels.nvidia\\.com/gpu\\.product",
        )

        step("Installing the CRD and a fresh namespace")
        demo.install_crd()
        demo.fresh_namespace()
        say(f"  CRD {GROUP}/{VERSION} Established; namespace {NAMESPACE} ready")

        step("Starting the operator (python -m mmd_operator, the operator image's entry point)")
        metrics_port = free_port()
        with operator(cluster, out / "operator.log", metrics_port):
            say("  operator running, watching namespace " + NAMESPACE)

            step("Applying llava, llava-tp2 and whisper (each fake build takes 4-8 s)")
            documents = [
                example("llava", build_seconds=4),
                tp2_on_a100s(build_seconds=8),
                example("whisper", build_seconds=6),
            ]
            for document in documents:
                demo.apply(document)
            names = [d["metadata"]["name"] for d in documents]
            times = demo.follow(names, ready)
            for name in names:
                say(f"  {name}: apply to Ready in {times[name]:.1f} s")

            step("A cache hit: llava-copy has llava's engine inputs, so no new build Job")
            jobs_before = demo.jobs()
            copy_document = copy.deepcopy(example("llava"))
            copy_document["metadata"]["name"] = "llava-copy"
            demo.apply(copy_document)
            demo.follow(["llava-copy"], ready)
            engine = demo.get("llava-copy")["status"]["engine"]
            say(
                f"  engine source: {engine['source']}; "
                f"build Jobs before {len(jobs_before)}, after {len(demo.jobs())}"
            )
            assert demo.jobs() == jobs_before, "the cache hit started a build"

            step("A failed build: the builder's step and last error line reach the status verbatim")
            failure = BuildFailed(
                step="build-llm", exit_code=1, reason="[TensorRT-LLM][ERROR] CUDA out of memory"
            )
            broken = example(
                "llava",
                engine={"maxBatchSize": 4},
                build={
                    "backoffLimit": 0,
                    "pod": {
                        "labels": {FAULT_LABEL: "fail"},
                        "annotations": {FAULT_MESSAGE_ANNOTATION: termination_message(failure)},
                    },
                },
            )
            broken["metadata"]["name"] = "llava-broken"
            say("  (simulated: the build pod carries a fault label and ends with this failure line)")
            demo.apply(broken)
            demo.follow(["llava-broken"], lambda b: (b.get("status") or {}).get("phase") == "Failed")

            step("A serving-only change: llava streams now; it rolls with a new repository, no build")
            before = demo.get("llava")["status"]
            demo.apply(example("llava", serving={"streaming": True}))
            demo.follow(
                ["llava"], lambda b: ready(b) and b["status"]["modelRepository"] != before["modelRepository"]
            )
            after = demo.get("llava")["status"]
            say(f"  model repository {before['modelRepository']} -> {after['modelRepository']}")
            say(f"  engine {after['engine']['cacheKey']} unchanged; build Jobs: {', '.join(demo.jobs())}")

            say(f"\n  The operator so far: {operator_figures(metrics_port)}")

            demo.show_what_exists("jobs,deployments,services,configmaps,persistentvolumeclaims")
            repository = after["modelRepository"]
            say(f"\n  The rendered repository of llava is ConfigMap {repository}:")
            say(f"    kubectl get configmap {repository} -n {NAMESPACE} -o yaml")
            say(
                "  and offline, with every object the operator applies:  "
                "mmctl render -f examples/llava.yaml -o out/llava"
            )

            step(
                "Serving llava's repository, exactly as its ConfigMap holds it, on the local CPU tritonserver"
            )
            configmap = demo.core.read_namespaced_config_map(repository, NAMESPACE)
            configs = {key.removesuffix(".pbtxt"): text for key, text in configmap.data.items()}
            # The plan of the kind of GPU its engine was built for (the cacheKey names it in every path).
            live = demo.get("llava")
            resource, _ = plan_resource(live)
            plan = plan_spec(resource.spec, recorded_kind(previous_status(live)))
            assert isinstance(plan, TritonPlan)
            assert configs == dict(plan.repository.configs), "the ConfigMap is not what the plan renders"
            served_plan = dataclasses.replace(
                plan, repository=ModelRepository(configs=configs, assembly=plan.repository.assembly)
            )
            say(
                "  (simulated: the GPU stages - the TensorRT-LLM engine, the vision encoder - run as doubles)"
            )
            install = TritonInstall.discover()
            with tempfile.TemporaryDirectory(prefix="mmd-demo-") as work:
                picture = media.image(Path(work) / "cat.jpg")
                with serve("llava", served_plan, install, Path(work), say) as server:
                    ask("infer", server.url("grpc"), picture, "What is in this picture?", *LLAVA_STREAM)
                    say("  (the answer is the doubles' trace of what reached each model, not a real caption)")
            say("  tritonserver stopped")
    leave_cluster(cluster, keep=args.keep_cluster or was_running, what="control plane")
    say(f"Demo done in {time.monotonic() - STARTED:.0f} s.")
    return 0
