"""Images in the engine step (docs/vision.md): the vision encoder runs inside the step, batched across the
requests whose scheduled chunks reach an image's rows, and its output replaces those rows' token
embeddings (models/decoder.py reads `FlatBatch.embeds`).

The encoder cache keys each image's projected rows by its content hash, so an image is encoded once: a
request that repeats it, another request sending it, a prompt chunked across steps (a chunk takes its
slice of the rows, so chunked prefill may split an image anywhere) or recomputed after preemption. The
cache holds at most `budget_bytes` (least recently used out first); a request in flight keeps its images'
rows until it is done, whatever the cache evicts. A text-only engine's null object refuses images.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from trtserve.engine.errors import UserError
from trtserve.engine.ids import RequestId
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.vision import ImageInput
from trtserve.models.vision import VisionEncoder
from trtserve.runtime.features import EngineFeature
from trtserve.runtime.features.long_rope import long_rope_scopes
from trtserve.runtime.request import Request
from trtserve.runtime.schedule import ScheduledChunk

DEFAULT_CACHE_BYTES = 256 << 20


@dataclass(frozen=True)
class VisionStats:
    encoded: int  # images run through the encoder
    cache_hits: int  # image lookups the encoder cache answered
    cache_misses: int
    cached_images: int  # images the cache holds now
    cached_bytes: int


class NoVision(EngineFeature):
    """A text-only engine: no image is taken, no row replaced."""

    def check(self, req: GenerateRequest) -> None:
        if req.options.images:
            raise UserError("this model is text-only and does not take images; send text, or serve a vision model")

    def embeds(self, chunks: list[ScheduledChunk]) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(flat token rows, their embeddings (rows, hidden)) the step replaces; None: none."""
        return None


def image_spans(token_ids: list[int], image_token_id: int, images: tuple[ImageInput, ...]) -> list[int]:
    """Where each image's rows start in the prompt: the image tokens, taken in order, num_tokens per image
    (each image's run contiguous); UserError where the prompt does not hold exactly those."""
    at = [i for i, t in enumerate(token_ids) if t == image_token_id]
    need = sum(img.num_tokens for img in images)
    if len(at) != need:
        raise UserError(
            f"the prompt holds {len(at)} image tokens (id {image_token_id}) but its {len(images)} images take {need}; "
            "expand each image placeholder to the model's tokens per image"
        )
    starts, k = [], 0
    for img in images:
        run = at[k : k + img.num_tokens]
        if run[-1] - run[0] != img.num_tokens - 1:
            raise UserError("an image's tokens must be contiguous in the prompt, one run of them per image")
        starts.append(run[0])
        k += img.num_tokens
    return starts


class Vision(NoVision):
    def __init__(self, encoder: VisionEncoder, budget_bytes: int = DEFAULT_CACHE_BYTES):
        self.encoder, self.cfg, self.budget = encoder, encoder.cfg, budget_bytes
        self.cache: OrderedDict[str, torch.Tensor] = OrderedDict()  # content hash -> (tokens, hidden), LRU
        self.cache_bytes = 0
        # per request in flight: (first prompt row, image) per image, and the rows it took from the encoder
        self.spans: dict[RequestId, list[tuple[int, ImageInput]]] = {}
        self.held: dict[RequestId, dict[str, torch.Tensor]] = {}
        self.encoded = self.hits = self.misses = 0

    def check(self, req: GenerateRequest) -> None:
        for img in req.options.images:
            shape = (3, self.cfg.processing.height, self.cfg.processing.width)
            if img.pixels.shape != shape or img.num_tokens != self.cfg.tokens_per_image:
                raise UserError(
                    f"an image of shape {img.pixels.shape} and {img.num_tokens} tokens does not fit this model "
                    f"({shape}, {self.cfg.tokens_per_image} tokens); preprocess it with the engine's VisionConfig"
                )
        image_spans(req.prompt_token_ids, self.cfg.image_token_id, req.options.images)

    def on_add(self, r: Request) -> None:
        images = r.options.images
        if images:
            starts = image_spans(r.prompt_token_ids, self.cfg.image_token_id, images)
            self.spans[r.seq.request] = list(zip(starts, images, strict=True))
            self.held[r.seq.request] = {}

    def on_request_done(self, r: Request) -> None:
        self.spans.pop(r.seq.request, None)
        self.held.pop(r.seq.request, None)

    def embeds(self, chunks: list[ScheduledChunk]) -> tuple[torch.Tensor, torch.Tensor] | None:
        wanted = []  # (request, flat row of the slice, image, first row of the image in it, rows)
        offset = 0
        for c in chunks:
            rid = c.request.seq.request
            end = c.start + c.num_new_tokens
            for start, img in self.spans.get(rid, ()):
                lo, hi = max(start, c.start), min(start + img.num_tokens, end)
                if lo < hi:
                    wanted.append((rid, offset + lo - c.start, img, lo - start, hi - lo))
            offset += c.num_new_tokens
        if not wanted:
            return None
        self._encode([(rid, img) for rid, _, img, _, _ in wanted])
        rows = torch.cat([torch.arange(at, at + n) for _, at, _, _, n in wanted])
        embs = torch.cat([self.held[rid][img.content_hash][first : first + n] for rid, _, img, first, n in wanted])
        return rows.to(self.encoder.device), embs  # (R,), (R, hidden)

    def _encode(self, needed: list[tuple[RequestId, ImageInput]]) -> None:
        """Every needed image's rows in its request's hold: from the cache, or encoded now in one batch."""
        todo: dict[str, ImageInput] = {}
        for rid, img in needed:
            h = img.content_hash
            if h in self.held[rid]:
                continue
            if h in self.cache:
                self.hits += 1
                self.cache.move_to_end(h)
                self.held[rid][h] = self.cache[h]
            elif h not in todo:
                self.misses += 1
                todo[h] = img
        if not todo:
            return
        pixels = torch.from_numpy(np.stack([img.pixels for img in todo.values()]))  # (N, 3, H, W)
        fresh = dict(zip(todo, self.encoder.encode(pixels), strict=True))  # hash -> (tokens, hidden)
        self.encoded += len(todo)
        for h, rows in fresh.items():
            self._put(h, rows)
        for rid, img in needed:
            if img.content_hash in fresh:
                self.held[rid].setdefault(img.content_hash, fresh[img.content_hash])

    def _put(self, h: str, rows: torch.Tensor) -> None:
        self.cache[h] = rows
        self.cache_bytes += rows.numel() * rows.element_size()
        while self.cache_bytes > self.budget and len(self.cache) > 1:
            _, old = self.cache.popitem(last=False)
            self.cache_bytes -= old.numel() * old.element_size()

    def stats(self) -> VisionStats:
        return VisionStats(self.encoded, self.hits, self.misses, len(self.cache), self.cache_bytes)


def model_features(engine) -> list[EngineFeature]:
    """The features a loaded engine's model brings: LongRoPE's keying (features/long_rope.py) where its rope
    has one, and its vision encoder's (runtime/loader.py: the null object for a text-only model)."""
    return [*long_rope_scopes(engine.model), engine.vision]
