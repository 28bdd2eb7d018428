"""`mmctl eval-asr`: transcribe a set of audio files through whisper_bls and report WER and CER.

The manifest lists one utterance per line, either JSON (`{"audio_filepath": "a.wav", "text": "..."}`; `audio`
works for the path too) or `path<TAB>reference`; relative paths are relative to the manifest. Audio is
read and resampled to 16 kHz by `triton.requests.load_audio`; requests go out from `--concurrency`
threads, one client each, with a progress bar on stderr. WER and CER come from jiwer after a light
normalisation (lower case, punctuation removed, whitespace collapsed) unless `--no-normalize`. Every file
is checked before the first request, so a bad manifest fails in one line before any work.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import jiwer
from tqdm import tqdm

from mmctl.triton.client import ServerError, TritonClient
from mmctl.triton.requests import Audio, RequestError, audio_request, load_audio
from mmd_operator.knowledge import ModelType, RepositoryLayout, knowledge_of

EXIT_FAILED = 1
_PUNCTUATION = re.compile(r"[^\w\s']")


@dataclass(frozen=True)
class Utterance:
    """One manifest line."""

    audio: Path
    reference: str


def read_manifest(path: Path) -> list[Utterance]:
    """Parse a JSON-lines or TSV manifest.

    Raises:
        RequestError: naming the file and line of the first problem.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise RequestError(f"{path}: no such manifest") from None
    except OSError as error:
        raise RequestError(f"{path}: cannot read: {error.strerror}") from None
    utterances = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as error:
                raise RequestError(f"{path}:{number}: not valid JSON: {error.msg}") from None
            audio = entry.get("audio_filepath") or entry.get("audio")
            text = entry.get("text")
        else:
            audio, _, text = line.partition("\t")
        if not audio or text is None:
            raise RequestError(f"{path}:{number}: needs an audio path and a reference text")
        audio_path = Path(audio) if Path(audio).is_absolute() else path.parent / audio
        if not audio_path.is_file():
            raise RequestError(f"{path}:{number}: {audio_path}: no such file")
        utterances.append(Utterance(audio_path, str(text)))
    if not utterances:
        raise RequestError(f"{path}: no utterances")
    return utterances


def normalize(text: str) -> str:
    """Lower case, punctuation removed, whitespace collapsed."""
    return " ".join(_PUNCTUATION.sub(" ", text.lower()).split())


def run_eval_asr(args: argparse.Namespace) -> int:
    """Handle `mmctl eval-asr`."""
    try:
        return _evaluate(args)
    except (RequestError, ServerError) as error:
        print(f"mmctl eval-asr: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


def _evaluate(args: argparse.Namespace) -> int:
    if args.concurrency < 1:
        raise RequestError("--concurrency must be at least 1")
    utterances = read_manifest(Path(args.manifest))
    audios: list[Audio] = [load_audio(str(u.audio)) for u in utterances]
    with TritonClient(args.url, timeout=args.timeout) as client:
        client.check_live()
        model_type = ModelType(args.model_type) if args.model_type else client.detect_model_type()
        client.check_ready("whisper_bls")
    knowledge = knowledge_of(model_type)
    if knowledge.layout is not RepositoryLayout.WHISPER:
        raise RequestError(f"{model_type} is not a speech model; eval-asr needs whisper or distil_whisper")
    local = threading.local()
    clients: list[TritonClient] = []

    def transcribe(audio: Audio) -> str:
        if not hasattr(local, "client"):
            local.client = TritonClient(args.url, timeout=args.timeout)
            clients.append(local.client)
        text = ""
        for response in local.client.responses(
            "whisper_bls", audio_request(knowledge, audio, args.prefix), ["TRANSCRIPTS"]
        ):
            text = response.text("TRANSCRIPTS")  # streamed transcripts are cumulative
        return text

    started = time.perf_counter()
    hypotheses: list[str] = []
    try:
        with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
            results = pool.map(transcribe, audios)
            for text in tqdm(results, total=len(audios), desc="transcribing", unit="file", file=sys.stderr):
                hypotheses.append(text)
    finally:
        for one in clients:
            one.close()
    elapsed = time.perf_counter() - started
    references = [u.reference for u in utterances]
    if not args.no_normalize:
        references = [normalize(t) for t in references]
        hypotheses = [normalize(t) for t in hypotheses]
    # jiwer refuses empty references; an empty reference with an empty hypothesis is simply correct.
    pairs = [(r, h) for r, h in zip(references, hypotheses, strict=True) if r]
    wer = jiwer.wer([r for r, _ in pairs], [h for _, h in pairs]) if pairs else 0.0
    cer = jiwer.cer([r for r, _ in pairs], [h for _, h in pairs]) if pairs else 0.0
    seconds = sum(a.seconds for a in audios)
    if args.output:
        with Path(args.output).open("w", encoding="utf-8") as out:
            for utterance, reference, hypothesis in zip(utterances, references, hypotheses, strict=True):
                out.write(
                    json.dumps({"audio": str(utterance.audio), "ref": reference, "hyp": hypothesis}) + "\n"
                )
    print(
        f"utterances {len(utterances)}  audio {seconds:.1f} s  wall {elapsed:.1f} s  "
        f"RTF {elapsed / seconds:.3f}"
    )
    print(f"WER {wer * 100:.2f}%  CER {cer * 100:.2f}%")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `eval-asr`'s arguments to its parser."""
    parser.description = "Transcribe every file of a manifest (JSON lines or path<TAB>text) and score it."
    parser.add_argument("--url", required=True, help="http://host:port or grpc://host:port (no scheme: HTTP)")
    parser.add_argument(
        "--manifest", required=True, help="JSON lines {audio_filepath, text} or path<TAB>text"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    parser.add_argument(
        "--model-type", choices=["whisper", "distil_whisper"], help="default: read from the server"
    )
    parser.add_argument("--prefix", help="decoder prompt (default: English transcription)")
    parser.add_argument("--no-normalize", action="store_true", help="score the raw text")
    parser.add_argument(
        "--output", metavar="FILE", help="write reference and hypothesis per file (JSON lines)"
    )
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.set_defaults(handler=run_eval_asr)
