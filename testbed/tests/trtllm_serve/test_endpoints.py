"""Every endpoint of the double over raw HTTP (urllib, and curl where installed): status, shape, content."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from mmd_testbed.trtllm_serve.facts import load
from testbed.tests.trtllm_serve.double import Double, call, chat_request, model_dir, sse_events, start


def _data_url(path: Path, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def _expected_image(path: Path) -> str:
    """What the answer must say about the image: computed here with Pillow, not by the double's code."""
    with Image.open(path) as image:
        rgb = image.convert("RGB")
    mean = "".join(f"{round(v):02x}" for v in ImageStat.Stat(rgb).mean)
    return f"image 1: {rgb.width}x{rgb.height}, mean colour #{mean}."


def test_health_is_200_with_an_empty_body(qwen: Double) -> None:
    reply = call(f"{qwen.url}/health")
    assert (reply.status, reply.body) == (200, b"")


def test_version_names_the_pinned_release(qwen: Double) -> None:
    assert call(f"{qwen.url}/version").json() == {"version": "1.2.1"}


def test_models_lists_the_model_directory_name(qwen: Double, qwen_dir: Path) -> None:
    listing = call(f"{qwen.url}/v1/models").json()
    assert listing["object"] == "list"
    [card] = listing["data"]
    assert card["id"] == qwen_dir.name == "Qwen2.5-VL-3B-Instruct"
    assert (card["object"], card["owned_by"]) == ("model", "tensorrt_llm")
    assert isinstance(card["created"], int)


def test_iteration_stats_are_a_json_list(qwen: Double) -> None:
    assert call(f"{qwen.url}/metrics").json() == []


def test_unknown_paths_and_methods_get_fastapi_answers(qwen: Double) -> None:
    missing = call(f"{qwen.url}/v1/completions/nothing")
    assert (missing.status, missing.json()) == (404, {"detail": "Not Found"})
    wrong = call(f"{qwen.url}/v1/chat/completions")
    assert (wrong.status, wrong.json()) == (405, {"detail": "Method Not Allowed"})


def test_chat_describes_the_image_it_received(qwen: Double, media_dir: Path) -> None:
    image = media_dir / "cat.png"
    parts = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": _data_url(image, "image/png")}},
    ]
    reply = call(f"{qwen.url}/v1/chat/completions", chat_request(parts))
    assert reply.status == 200, reply.body
    body = reply.json()
    assert (body["object"], body["model"]) == ("chat.completion", "served")
    assert body["id"].startswith("chatcmpl-")
    [choice] = body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "stop"
    content = choice["message"]["content"]
    assert _expected_image(image) in content
    assert content.endswith("prompt: What is this?")
    usage = body["usage"]
    assert usage["completion_tokens"] == len(content.split())
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_max_tokens_cuts_the_answer_with_finish_reason_length(qwen: Double) -> None:
    body = call(f"{qwen.url}/v1/chat/completions", chat_request("one two three four", max_tokens=3)).json()
    [choice] = body["choices"]
    assert choice["finish_reason"] == "length"
    assert len(choice["message"]["content"].split()) == 3 == body["usage"]["completion_tokens"]


def test_streaming_sends_sse_chunks_then_done_and_usage(qwen: Double, media_dir: Path) -> None:
    parts = [
        {"type": "text", "text": "Describe it."},
        {"type": "video_url", "video_url": {"url": _data_url(media_dir / "clip.gif", "image/gif")}},
    ]
    whole = call(f"{qwen.url}/v1/chat/completions", chat_request(parts)).json()
    reply = call(
        f"{qwen.url}/v1/chat/completions",
        chat_request(parts, stream=True, stream_options={"include_usage": True}),
    )
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/event-stream")
    events = list(sse_events(reply.body))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    assert "video 1: 4 frames of 32x24 (4 sampled)." in text
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]


def test_prometheus_metrics_carry_the_real_names(qwen: Double) -> None:
    call(f"{qwen.url}/v1/chat/completions", chat_request("count me"))
    reply = call(f"{qwen.url}/prometheus/metrics")
    assert reply.status == 200
    text = reply.body.decode()
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    for name in load().metric_names:
        assert any(line.startswith(name) for line in samples), name
    assert not any("_created" in line for line in samples)  # the real server's multiprocess registry has none
    assert (
        'trtllm_request_success_total{engine_type="undefined",finished_reason="stop",model_name="undefined"}'
        in text
    )
    assert "trtllm_e2e_request_latency_seconds_count" in text


def test_no_prometheus_metrics_without_return_perf_metrics(gemma: Double) -> None:
    assert call(f"{gemma.url}/prometheus/metrics").status == 404


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_streams_a_chat_answer(qwen: Double) -> None:
    result = subprocess.run(
        [
            "curl",
            "-sSN",
            "--max-time",
            "20",
            f"{qwen.url}/v1/chat/completions",
            "-H",
            "Content-Type: application/json",
            "-d",
            json.dumps(chat_request("hello there", stream=True)),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    events = list(sse_events(result.stdout.encode()))
    assert events[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1]).endswith(
        "prompt: hello there"
    )


def test_delay_and_batch_slots_queue_requests(models_root: Path, logs: Path) -> None:
    """MMD_DOUBLE_DELAY_SECONDS per request, at most --max_batch_size at once: 3 requests through 1 slot."""
    model = model_dir(models_root, "Mistral3ForConditionalGeneration", "mistral3")
    double = start(model, logs, ["--max_batch_size", "1"], env={"MMD_DOUBLE_DELAY_SECONDS": "0.3"})
    try:
        statuses: list[int] = []
        threads = [
            threading.Thread(
                target=lambda: statuses.append(
                    call(f"{double.url}/v1/chat/completions", chat_request("hi")).status
                )
            )
            for _ in range(3)
        ]
        began = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
        elapsed = time.monotonic() - began
    finally:
        double.stop()
    assert statuses == [200, 200, 200]
    assert elapsed >= 0.9, f"3 requests of 0.3 s through one slot took {elapsed:.2f} s"


def test_the_snapshots_knobs_fail_a_share_of_requests_uncounted_and_slow_each(
    models_root: Path, logs: Path, tmp_path: Path
) -> None:
    """`mmd_double` in config.json: `fail_share` answers that share 400 as the real server answers an
    exception (its metrics count only what was answered); `seconds_per_request` delays each one."""
    model = model_dir(models_root, "Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", name="bad-qwen")
    config = json.loads((model / "config.json").read_text())
    knobs = {"fail_share": 0.5, "seconds_per_request": 0.2}
    (model / "config.json").write_text(json.dumps({**config, "mmd_double": knobs}))
    options = tmp_path / "extra-llm-api-config.yml"
    options.write_text("return_perf_metrics: true\n")
    double = start(model, logs, ["--config", str(options)])
    try:
        began = time.monotonic()
        replies = [call(f"{double.url}/v1/chat/completions", chat_request("hi")) for _ in range(4)]
        elapsed = time.monotonic() - began
        metrics = call(f"{double.url}/prometheus/metrics").body.decode()
    finally:
        double.stop()
    assert [reply.status for reply in replies] == [200, 400, 200, 400]
    assert replies[1].json() == {
        "object": "error",
        "message": "request 2 fails: the snapshot fails 0.5 (fail_share)",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    assert elapsed >= 0.8, f"4 requests of 0.2 s took {elapsed:.2f} s"
    assert 'trtllm_e2e_request_latency_seconds_count{engine_type="undefined",model_name="undefined"} 2.0' in (
        metrics
    )
