"""Per-request overhead of the ensemble path against the LLM double alone (a benchmark, not a test).

Renders examples/llava.yaml, writes it with the triton tier's doubles, starts the real tritonserver and
sends N requests (default 200) each way over gRPC, one at a time, after a warm-up:

- ensemble: text + a 336x336 image tensor through preprocessing -> multimodal_encoders -> tensorrt_llm
  -> postprocessing (four Python-backend models, three of them doubles of GPU/serving-image code);
- direct: the same prompt's token ids straight to the tensorrt_llm double.

Both go through the gRPC stream API because the rendered tensorrt_llm is decoupled. The difference of the
medians is what the ensemble's extra hops cost on this machine (Python stubs, shared-memory copies,
scheduling); it says nothing about GPU model time. Run: `make bench-triton` or
`.venv/bin/python -m benchmarks.ensemble_overhead [--requests N]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from tqdm import tqdm

from mmctl.triton.client import TritonClient
from mmctl.triton.requests import Tensor, TextRequest, text_request
from mmd_operator.plan.resource_plan import plan_resource
from mmd_testbed.triton import media
from mmd_testbed.triton.localserver import TritonInstall
from mmd_testbed.triton.serving import serve

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _measure(client: TritonClient, model: str, tensors: list[Tensor], output: str, count: int) -> list[float]:
    seconds = []
    for _ in tqdm(range(count), desc=f"{model:>13}", unit="req", file=sys.stderr):
        started = time.perf_counter()
        responses = list(client.responses(model, tensors, [output]))
        seconds.append(time.perf_counter() - started)
        assert responses, f"{model} answered nothing"
    return seconds


def _summary(name: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p90 = ms[int(0.9 * (len(ms) - 1))]
    return f"{name:<22} median {statistics.median(ms):7.2f} ms   p90 {p90:7.2f} ms   (n={len(ms)})"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the medians and p90s."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args(argv)
    install = TritonInstall.discover()
    _, plan = plan_resource(yaml.safe_load((EXAMPLES / "llava.yaml").read_text()))
    with tempfile.TemporaryDirectory(prefix="bench-triton-") as work:
        root = Path(work)
        picture = media.image(root / "bench.jpg")
        ensemble_inputs = text_request(
            plan.settings.knowledge, TextRequest(text="what is this", images=[str(picture)], max_tokens=8)
        )
        prompt = np.array([list(b"USER: what is this ASSISTANT:")], dtype=np.int32)
        direct_inputs = [
            Tensor("input_ids", prompt, "INT32"),
            Tensor("input_lengths", np.array([[prompt.shape[1]]], dtype=np.int32), "INT32"),
            Tensor("request_output_len", np.array([[8]], dtype=np.int32), "INT32"),
        ]
        with (
            serve("llava", plan, install, root, lambda line: print(line.strip(), file=sys.stderr)) as served,
            served.client("grpc") as client,
        ):
            _measure(client, "ensemble", ensemble_inputs, "text_output", args.warmup)
            _measure(client, "tensorrt_llm", direct_inputs, "output_ids", args.warmup)
            ensemble = _measure(client, "ensemble", ensemble_inputs, "text_output", args.requests)
            direct = _measure(client, "tensorrt_llm", direct_inputs, "output_ids", args.requests)
    print(_summary("ensemble (4 models)", ensemble))
    print(_summary("tensorrt_llm directly", direct))
    overhead = statistics.median(ensemble) - statistics.median(direct)
    print(f"ensemble overhead      median {overhead * 1000:7.2f} ms per request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
