"""The doubles of the models around the engine: `preprocessing`, `multimodal_encoders`, `postprocessing`.

`preprocessing` encodes a trace of its inputs (text, images fetched from URLs, raw bytes, video, ids) as
the prompt's token ids, inserting one fake prompt-table id per block of them the real one inserts, and
refuses what the real one refuses; `multimodal_encoders` encodes a trace of the tensors it got as the
prompt table (FP16) or, for mllama, as encoder features (BF16); `postprocessing` detokenizes into one
flat string per (batch item x beam). Imports `base` and what it imports.
"""

from __future__ import annotations

import io
import re
from typing import Any

import numpy as np
from PIL import Image

from . import codec
from .base import (
    HIDDEN,
    MLLAMA_TILES,
    MULTI_IMAGE_MARKER,
    QWEN2_VL_GRID,
    QWEN2_VL_PATCH,
    UNBOUND,
    DoubleError,
    Model,
    fetch_image,
    pad,
    strings,
)

# The types whose v0.19.0 preprocessing has no vision preprocessor (they take preprocessed pixels only).
_NO_VISION_PREPROCESSOR = ("blip2", "llava", "vila")
MLLAMA_IMAGE_TOKEN = "<|image|>"


class Preprocessing(Model):
    """Tokenizes (byte tokenizer) and, for server-side image types, loads images like the real one.

    Like the real one it always answers the decoder ids, both word lists and the embedding bias (empty
    when the request has none), and the vision tensors only for a request that carries an image or video;
    and it refuses what the real one refuses (see `check`).
    """

    @property
    def max_num_images(self) -> int | None:
        """The `max_num_images` parameter as the real one reads it (None when unset or not a number)."""
        value = str(self.params.get("max_num_images") or "").strip()
        return int(value) if value.isdigit() else None

    def check(self, inputs: dict[str, Any], texts: list[str]) -> None:
        """Refuse what the v0.19.0 preprocessing refuses for this model type, as it does.

        It raises out of `execute` (failing every request of the batch) with the exception the real code
        raises, in its order: the vision preprocessor's presence, the type's image processing (mllama's
        Hugging Face processor, LLaVA-OneVision's batch assertion), the image-less types, the prompt's
        `<image>` count, then Qwen2-VL's missing extra ids.
        """
        model_type = self.spec["model_type"]
        server_side = [name for name in ("IMAGE_URL", "IMAGE_BYTES", "VIDEO_BYTES") if name in inputs]
        if server_side and model_type in _NO_VISION_PREPROCESSOR:
            raise AssertionError("Vision preprocessor for preparing images before encoding is None")
        if model_type == "mllama" and server_side:
            self.check_mllama(inputs, texts)
        if model_type == "llava_onevision" and server_side == ["IMAGE_BYTES"]:
            pixels = self.array(inputs["IMAGE_BYTES"], "IMAGE_BYTES")  # every image of every row, one list
            if pixels.shape[0] * pixels.shape[1] != len(texts):
                raise AssertionError("Image must have the same batch size as Query.")
        if model_type == "llava_onevision" and not server_side:
            # It computes the number of visual tokens from the processed image, so it cannot go without.
            raise AssertionError("Image processing requires IMAGE_BYTES or IMAGE_URL to be provided")
        limit = self.max_num_images
        if limit is not None and limit > 1:
            # Only then does the real one split the prompt on the marker, and count the pieces.
            for text in texts:
                found = text.count(MULTI_IMAGE_MARKER)
                if found > limit:
                    raise ValueError(
                        f"The number of images in the request ({found}) exceeds the maximum allowed "
                        f"({limit})."
                    )
        # The two qwen2_vl failures are Python's own, of a variable its path never sets: without a
        # server-side image the processor never runs; with PROMPT_TABLE_EXTRA_ID the extra ids are never
        # built.
        if model_type == "qwen2_vl" and not server_side:
            raise UnboundLocalError(UNBOUND.format("qwen2vl_input_id_tensor"))
        if model_type == "qwen2_vl" and "PROMPT_TABLE_EXTRA_ID" in inputs:
            raise UnboundLocalError(UNBOUND.format("prompt_table_extra_ids"))

    def check_mllama(self, inputs: dict[str, Any], texts: list[str]) -> None:
        """Hugging Face's MllamaProcessor, called once per image list as the real one calls it.

        URLs: one call per row with that row's images. Bytes: every image of every row in one list,
        one call per image with the query of the same index (so several images in a row run past the
        queries). Each call compares the row's `<|image|>` tags with its images, when it has tags.
        """
        if "IMAGE_URL" in inputs:
            urls = self.array(inputs["IMAGE_URL"], "IMAGE_URL")
            counts = [len(strings(urls[row])) for row in range(urls.shape[0])]
        else:
            pixels = self.array(inputs["IMAGE_BYTES"], "IMAGE_BYTES")
            counts = [1] * (pixels.shape[0] * pixels.shape[1])
        for index, count in enumerate(counts):
            if index >= len(texts):
                raise IndexError("list index out of range")
            tags = texts[index].count(MLLAMA_IMAGE_TOKEN)
            if tags and tags != count:
                raise ValueError(
                    f"The number of image tokens in each text ([{tags}]) should be the same as the number "
                    f"of provided images per batch ([{count}]). "
                )

    def image_slots(self, text: str) -> int:
        """How many blocks of fake prompt-table ids the real one inserts into `text`'s ids.

        With `max_num_images` above 1, one per `<image>` run: it splits the ids on the marker and drops
        empty pieces, so adjacent markers make one block and a prompt without one gets none. Otherwise
        one block, wherever the markers are, for every type whose LLM takes a prompt table.
        """
        if not self.spec["knowledge"]["uses_prompt_table"]:
            return 0
        limit = self.max_num_images
        if limit is not None and limit > 1:
            return len(re.findall(f"(?:{re.escape(MULTI_IMAGE_MARKER)})+", text))
        return 1

    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        """Token ids with a trace of the request, and the vision tensors of its images."""
        knowledge = self.spec["knowledge"]
        query = self.array(inputs["QUERY"], "QUERY")
        batch = query.shape[0]
        if knowledge["multimodal_preprocessing"]:
            self.check(inputs, [" ".join(strings(query[row])) for row in range(batch)])
        outputs: dict[str, Any] = {}
        all_ids, extra_rows = [], []
        for row in range(batch):
            text = " ".join(strings(query[row]))
            # The digest separates segments with "|" and items with ","; keep both out of echoed text.
            items = [f"text={text.replace('|', '¦').replace(',', ';')}"]
            images = 0
            if "DECODER_QUERY" in inputs:
                items.append(
                    f"decoder_text={strings(self.array(inputs['DECODER_QUERY'], 'DECODER_QUERY')[row])[0]}"
                )
            if "IMAGE_BYTES" in inputs:
                pixels = self.array(inputs["IMAGE_BYTES"], "IMAGE_BYTES")[row]
                images = pixels.shape[0]
                items.append(
                    f"image_bytes={'x'.join(map(str, pixels.shape))}#{codec.short_hash(pixels.tobytes())}"
                )
            if "IMAGE_URL" in inputs:
                for url in strings(self.array(inputs["IMAGE_URL"], "IMAGE_URL")[row]):
                    scheme, data = fetch_image(url)
                    width, height = Image.open(io.BytesIO(data)).size
                    items.append(f"image_url={scheme}#{codec.short_hash(data)}:{width}x{height}")
                    images += 1
            video = "VIDEO_BYTES" in inputs
            frames = 0
            if video:
                clip = self.array(inputs["VIDEO_BYTES"], "VIDEO_BYTES")[row]
                frames = clip.shape[0]
                items.append(f"video={'x'.join(map(str, clip.shape))}#{codec.short_hash(clip.tobytes())}")
                images = 1
            if "IMAGE" in inputs:  # InternLM-XComposer2: this model runs the ViT itself
                images = 1
                if text.count(knowledge["image_marker"]) != 1:
                    raise DoubleError(f"the prompt must contain exactly one {knowledge['image_marker']}")
            output_len = int(
                self.array(inputs["REQUEST_OUTPUT_LEN"], "REQUEST_OUTPUT_LEN")[row].reshape(-1)[0]
            )
            items.append(f"max_tokens={output_len}")
            for name in ("END_ID", "PAD_ID", "PROMPT_TABLE_EXTRA_ID"):
                if name in inputs:
                    items.append(f"{name.lower()}={int(self.array(inputs[name], name)[row].reshape(-1)[0])}")
            for name in ("BAD_WORDS_DICT", "STOP_WORDS_DICT", "EMBEDDING_BIAS_WORDS"):
                if name in inputs:
                    items.append(f"{name.lower()}={';'.join(strings(self.array(inputs[name], name)[row]))}")
            # One fake prompt-table id per block of them the real one inserts.
            slots = self.image_slots(text)
            ids = [codec.VOCAB_SIZE + i for i in range(slots)] + codec.encode_text("pre:" + ",".join(items))
            all_ids.append(ids)
            if "PROMPT_TABLE_EXTRA_ID" in inputs:
                extra = int(
                    self.array(inputs["PROMPT_TABLE_EXTRA_ID"], "PROMPT_TABLE_EXTRA_ID")[row].reshape(-1)[0]
                )
                extra_rows.append([extra if i >= codec.VOCAB_SIZE else 0 for i in ids])
            if images and "PIXEL_VALUES" in self.contract["output"] and "IMAGE" not in inputs:
                outputs.setdefault("PIXEL_VALUES", []).append(self.pixel_values(images, frames, row + 1))
            if video and self.declares("IS_VIDEO_INPUT"):
                outputs.setdefault("IS_VIDEO_INPUT", []).append([True])
            if images:
                for name in knowledge["preprocessing_extra_outputs"]:
                    outputs.setdefault(name, []).append(_extra_output(name, images, len(ids)))
            if "IMAGE" in inputs:
                image = self.array(inputs["IMAGE"], "IMAGE")[row]
                trace = codec.encode_text(f"enc:IMAGE={self.describe('IMAGE', image[None], with_hash=True)}")
                outputs.setdefault("prompt_embedding_table", []).append(_table(trace))
                outputs.setdefault("prompt_vocab_size", []).append([codec.VOCAB_SIZE])
        end_ids = (
            self.array(inputs["END_ID"], "END_ID")
            if "END_ID" in inputs
            else np.full((batch, 1), knowledge["end_id"])
        )
        pad_ids = (
            self.array(inputs["PAD_ID"], "PAD_ID")
            if "PAD_ID" in inputs
            else np.full((batch, 1), knowledge["pad_id"])
        )
        # The real one pads a batch with the tokenizer's pad token.
        result = [
            self.output("INPUT_ID", pad(all_ids, fill=int(knowledge["pad_id"]))),
            self.output("REQUEST_INPUT_LEN", [[len(ids)] for ids in all_ids]),
            self.output("REQUEST_OUTPUT_LEN", self.array(inputs["REQUEST_OUTPUT_LEN"], "REQUEST_OUTPUT_LEN")),
            self.output("OUT_END_ID", np.asarray(end_ids).reshape(batch, 1)),
            self.output("OUT_PAD_ID", np.asarray(pad_ids).reshape(batch, 1)),
        ]
        if self.declares("DECODER_INPUT_ID"):
            # Without DECODER_QUERY the real one sends one pad id per batch item as the decoder prompt.
            if "DECODER_QUERY" in inputs:
                decoder = self.array(inputs["DECODER_QUERY"], "DECODER_QUERY")
                decoder_ids = [codec.encode_text(" ".join(strings(decoder[row]))) for row in range(batch)]
            else:
                decoder_ids = [[int(pad)] for pad in np.asarray(pad_ids).reshape(-1)]
            result.append(self.output("DECODER_INPUT_ID", pad(decoder_ids, fill=int(knowledge["pad_id"]))))
            if self.declares("REQUEST_DECODER_INPUT_LEN"):
                result.append(self.output("REQUEST_DECODER_INPUT_LEN", [[len(ids)] for ids in decoder_ids]))
        for name, given in (("BAD_WORDS_IDS", "BAD_WORDS_DICT"), ("STOP_WORDS_IDS", "STOP_WORDS_DICT")):
            if self.declares(name):
                words = None
                if given in inputs:
                    words = [strings(self.array(inputs[given], given)[r]) for r in range(batch)]
                result.append(self.output(name, _words_ids(words, batch)))
        if self.declares("EMBEDDING_BIAS"):
            result.append(self.output("EMBEDDING_BIAS", self.embedding_bias(inputs, batch)))
        if extra_rows and self.declares("OUT_PROMPT_TABLE_EXTRA_IDS"):
            result.append(self.output("OUT_PROMPT_TABLE_EXTRA_IDS", pad(extra_rows)))
        if "prompt_embedding_table" in outputs:
            result.append(
                self.output("prompt_embedding_table", _stack_tables(outputs.pop("prompt_embedding_table")))
            )
        for name, rows in outputs.items():
            if len(rows) == batch:  # every row had an image: the tensor is complete
                result.append(self.output(name, np.stack([np.asarray(r) for r in rows])))
        return result

    def pixel_values(self, images: int, frames: int, fill: int) -> np.ndarray:
        """One batch item's PIXEL_VALUES (all `fill`), laid out as the model type's real processor does.

        mllama: [images x tiles, 3, H, W] (every image padded to 4 tiles); Qwen2-VL: [1, 1, patches,
        1176] (flattened patches); LLaVA-OneVision: [patches, 3, H, W], or [frames, 3, H, W] for video.
        """
        model_type = self.spec["model_type"]
        if model_type == "mllama":
            shape: tuple[int, ...] = (images * MLLAMA_TILES, 3, 4, 4)
        elif model_type == "qwen2_vl":
            shape = (1, 1, int(np.prod(QWEN2_VL_GRID)), QWEN2_VL_PATCH)
        else:
            shape = (frames or images, 3, 4, 4)
        return np.full(shape, fill, np.float16)

    def embedding_bias(self, inputs: dict[str, Any], batch: int) -> np.ndarray:
        """[batch, vocab]: each word's weight on its token ids; [batch, 0] without words and weights."""
        if "EMBEDDING_BIAS_WORDS" not in inputs or "EMBEDDING_BIAS_WEIGHTS" not in inputs:
            return np.empty((batch, 0), np.float32)
        words = self.array(inputs["EMBEDDING_BIAS_WORDS"], "EMBEDDING_BIAS_WORDS")
        weights = self.array(inputs["EMBEDDING_BIAS_WEIGHTS"], "EMBEDDING_BIAS_WEIGHTS")
        bias = np.zeros((batch, codec.VOCAB_SIZE), np.float32)
        for row in range(batch):
            row_words, row_weights = strings(words[row]), weights[row].reshape(-1)
            if len(row_words) != len(row_weights):
                raise AssertionError(
                    "Embedding bias words must have same dimension as embedding bias weights"
                )
            for word, weight in zip(row_words, row_weights, strict=True):
                for token in codec.encode_text(word):
                    bias[row, token] += float(weight)
        return bias


def _words_ids(word_lists: list[list[str]] | None, batch: int) -> np.ndarray:
    """Word lists as TensorRT-LLM's [batch, 2, n] layout: token ids, then end offsets padded with -1.

    Empty when the request has no words ([batch, 2, 0]); words without tokens are skipped.
    """
    if word_lists is None:
        return np.empty((batch, 2, 0), np.int32)
    flat, offsets = [], []
    for words in word_lists:
        ids: list[int] = []
        ends: list[int] = []
        for word in words:
            tokens = codec.encode_text(word)
            if tokens:
                ids += tokens
                ends.append(len(ids))
        flat.append(ids)
        offsets.append(ends)
    width = max([1, *(len(ids) for ids in flat)])
    rows = [
        [ids + [0] * (width - len(ids)), ends + [-1] * (width - len(ends))]
        for ids, ends in zip(flat, offsets, strict=True)
    ]
    return np.array(rows, np.int32)


def _extra_output(name: str, images: int, length: int) -> np.ndarray:
    """Model-type specific vision tensors of the real preprocessing (one batch item), plausible shapes."""
    if name == "IMAGE_GRID_THW":
        return np.array(QWEN2_VL_GRID, np.int64)
    shapes = {
        "ASPECT_RATIO_IDS": (images,),
        "ASPECT_RATIO_MASK": (images, MLLAMA_TILES),
        "CROSS_ATTENTION_MASK": (length, images, MLLAMA_TILES),
        "ATTENTION_MASK": (length,),
        "IMAGE_SIZES": (2,),
        "VISION_INPUT_ID": (length,),
    }
    return np.ones(shapes[name], dtype=np.int64)


def _table(trace: list[int], hidden: int = HIDDEN) -> np.ndarray:
    """A prompt table [rows, hidden] whose first column spells `trace` (exact in FP16 and BF16)."""
    table = np.zeros((len(trace), hidden), dtype=np.float32)
    table[:, 0] = trace
    return table


def _stack_tables(tables: list[np.ndarray]) -> np.ndarray:
    rows = max(t.shape[0] for t in tables)
    return np.stack([np.pad(t, ((0, rows - t.shape[0]), (0, 0))) for t in tables])


def read_table(table: np.ndarray) -> str:
    """The trace a prompt table (or encoder features) carries."""
    return codec.decode_ids(int(v) for v in table[:, 0] if v > 0)


class MultimodalEncoders(Model):
    """The vision engine's stand-in: traces its inputs into the prompt table or encoder features.

    Answers what the real one answers per model type: mllama the encoder features, their length, the
    cross-attention mask and the skip flag (also without an image); LLaVA-OneVision the prompt table only;
    Qwen2-VL the prompt table and the M-RoPE tensors; the other types the prompt table and its size.
    """

    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        """The encoder's outputs for one request."""
        knowledge = self.spec["knowledge"]
        source = next((name for name in ("IMAGE", "pixel_values") if name in inputs), None)
        if source is None:
            if not knowledge["text_only_requests"]:
                raise AssertionError("There is no preprocessed image tensor to encode")
            return self.without_image(inputs)
        images = self.array(inputs[source], source)
        batch = images.shape[0]
        traces = []
        for row in range(batch):
            items = [f"{source}={self.describe(source, images[row][None], with_hash=source == 'IMAGE')}"]
            for name, tensor in inputs.items():
                if name != source:
                    values = self.array(tensor, name)[row]
                    items.append(
                        f"{name}={int(values.reshape(-1)[0])}"
                        if values.size == 1
                        else f"{name}={self.describe(name, values[None])}"
                    )
            traces.append(_table(codec.encode_text("enc:" + ",".join(items))))
        table = _stack_tables(traces)
        rows = table.shape[1]
        if knowledge["encoder_decoder"]:
            text = 0
            if "cross_attention_mask" in inputs:
                text = self.array(inputs["cross_attention_mask"], "cross_attention_mask").shape[1]
            return [
                self.output("ENCODER_INPUT_FEATURES", table),
                self.output("ENCODER_OUTPUT_LENGTHS", np.full((batch, 1), rows)),
                # The prompt's rows, then one per token to generate, against every feature row.
                self.output(
                    "CROSS_ATTENTION_MASK", np.ones((batch, text + self.max_tokens(inputs), rows), bool)
                ),
                self.output("SKIP_CROSS_ATTN_BLOCKS", np.zeros((batch, 1), bool)),
            ]
        result = [self.output("OUT_PROMPT_EMBEDDING_TABLE", table)]
        if knowledge["mrope"]:
            result += [
                self.output("MROPE_ROTARY_COS_SIN", np.zeros((batch, 4))),
                self.output("MROPE_POSITION_DELTAS", np.zeros((batch, 1))),
            ]
        if knowledge["encoder_answers_vocab_size"]:
            # The number of prompt-table rows one image fills (not a vocabulary size).
            result.append(self.output("OUT_PROMPT_VOCAB_SIZE", np.full((batch, 1), rows)))
        return result

    def max_tokens(self, inputs: dict[str, Any]) -> int:
        """The request's max_tokens (0 when absent), which sizes mllama's cross-attention mask."""
        return int(self.scalar(inputs, "max_tokens", 0, 0))

    def without_image(self, inputs: dict[str, Any]) -> list[Any]:
        """Text-only mllama: zero features for one batch item, and the flag to skip cross attention."""
        max_tokens = self.max_tokens(inputs)
        # The real one answers batch 1 here: a zero [1, 1, 4, 1, hidden] embedding, flattened to 4 rows,
        # and a [1, max_tokens, 1, 4] mask flattened to one column plus one row per token to generate.
        return [
            self.output("ENCODER_INPUT_FEATURES", np.zeros((1, MLLAMA_TILES, HIDDEN))),
            self.output("ENCODER_OUTPUT_LENGTHS", np.full((1, 1), MLLAMA_TILES)),
            self.output("CROSS_ATTENTION_MASK", np.zeros((1, max_tokens * (MLLAMA_TILES + 1), 1), bool)),
            self.output("SKIP_CROSS_ATTN_BLOCKS", np.ones((1, 1), bool)),
        ]


class Postprocessing(Model):
    """Detokenizes with the byte tokenizer, skipping special and fake ids.

    OUTPUT is flat like the real one's: one string per (batch item x beam), in that order.
    """

    def compute(self, inputs: dict[str, Any]) -> list[Any]:
        """The text of every beam of every batch item."""
        tokens = self.array(inputs["TOKENS_BATCH"], "TOKENS_BATCH")
        lengths = self.array(inputs["SEQUENCE_LENGTH"], "SEQUENCE_LENGTH")
        texts = [
            codec.decode_ids(tokens[b, beam, : int(lengths[b, beam])]).encode()
            for b in range(tokens.shape[0])
            for beam in range(tokens.shape[1])
        ]
        output = np.empty(len(texts), dtype=object)
        output[:] = texts
        return [self.output("OUTPUT", output)]
