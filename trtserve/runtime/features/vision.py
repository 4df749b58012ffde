"""Images in the engine step (docs/vision.md): the vision encoder runs inside the step, batched across the
requests whose scheduled chunks reach an image's rows, and its output replaces those rows' token
embeddings (models/decoder.py reads `FlatBatch.embeds`).

The encoder cache keys each image's projected rows by its content hash, so an image is encoded once: a
request that repeats it, another request sending it, a prompt chunked across steps (a chunk takes its
slice of the rows, so chunked prefill may split an image anywhere) or recomputed after preemption. The
cache holds at most `budget_bytes` (least recently used out first); a request in flight keeps its images'
rows until it is done, whatever the cache evicts. A text-only engine's null object refuses images.

Where an image's rows attend to each other both ways (Gemma 3), the runner passes their spans to the
attention mask, and the scheduler ends a chunk before such an image rather than inside it: its first rows'
keys would otherwise miss the later ones.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

from trtserve.engine.errors import UserError
from trtserve.engine.ids import RequestId
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.stats import VisionStats
from trtserve.engine.vision import ImageInput
from trtserve.models.vision import VisionEncoder
from trtserve.runtime.features import EngineFeature
from trtserve.runtime.features.long_rope import long_rope_scopes
from trtserve.runtime.request import Request
from trtserve.runtime.schedule import ScheduledChunk

DEFAULT_CACHE_BYTES = 256 << 20


class NoVision(EngineFeature):
    """A text-only engine: no image is taken, no row replaced."""

    def check(self, req: GenerateRequest) -> None:
        if req.options.images:
            raise UserError("this model is text-only and does not take images; send text, or serve a vision model")

    def embeds(self, chunks: list[ScheduledChunk]) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(flat token rows, their embeddings (rows, hidden)) the step replaces; None: none."""
        return None

    def stats(self) -> VisionStats:
        return VisionStats()

    def bidirectional(self, c: ScheduledChunk) -> tuple[tuple[int, int], ...]:
        """The [start, end) positions of c's images whose rows attend to each other both ways."""
        return ()

    def check_budget(self, max_num_tokens: int) -> None:
        """UserError where one step cannot hold an image that must run in one chunk."""

    def chunk_tokens(self, r: Request, start: int, n: int) -> int:
        """How many of n prompt tokens from `start` one chunk may run: fewer where it would end inside an
        image whose rows attend both ways (0: that image does not fit this step)."""
        return n


def image_spans(token_ids: list[int], image_token_id: int, images: tuple[ImageInput, ...]) -> list[list[int]]:
    """Where each image's runs of rows start in the prompt: the image tokens, taken in order, num_tokens per
    image in one contiguous run per frame (tile); UserError where the prompt does not hold exactly those."""
    at = [i for i, t in enumerate(token_ids) if t == image_token_id]
    need = sum(img.num_tokens for img in images)
    if len(at) != need:
        raise UserError(
            f"the prompt holds {len(at)} image tokens (id {image_token_id}) but its {len(images)} images take {need}; "
            "expand each image placeholder to the model's tokens per image"
        )
    starts, k = [], 0
    for img in images:
        per = img.num_tokens // img.frames
        runs = [at[k + f * per : k + (f + 1) * per] for f in range(img.frames)]
        if any(run[-1] - run[0] != per - 1 for run in runs):
            raise UserError("an image's tokens must be contiguous in the prompt, one run of them per image (or tile)")
        starts.append([run[0] for run in runs])
        k += img.num_tokens
    return starts


class Vision(NoVision):
    def __init__(self, encoder: VisionEncoder, budget_bytes: int = DEFAULT_CACHE_BYTES):
        self.encoder, self.cfg, self.budget = encoder, encoder.cfg, budget_bytes
        self.cache: OrderedDict[str, torch.Tensor] = OrderedDict()  # content hash -> (tokens, hidden), LRU
        self.cache_bytes = 0
        # per request in flight: (each frame's first prompt row, image) per image, and the rows it took from the encoder
        self.spans: dict[RequestId, list[tuple[list[int], ImageInput]]] = {}
        self.held: dict[RequestId, dict[str, torch.Tensor]] = {}
        self.encoded = self.hits = self.misses = 0

    def check(self, req: GenerateRequest) -> None:
        shape = (3, self.cfg.processing.height, self.cfg.processing.width)
        ndim = 3 if self.cfg.tiles is None else 4  # a tiled image's frames, stacked
        for img in req.options.images:
            tokens = self.cfg.tokens_per_image * img.frames
            if img.pixels.ndim != ndim or img.pixels.shape[-3:] != shape or img.num_tokens != tokens:
                raise UserError(
                    f"an image of shape {img.pixels.shape} and {img.num_tokens} tokens does not fit this model "
                    f"({shape} per frame, {self.cfg.tokens_per_image} tokens each); preprocess it with the engine's "
                    "VisionConfig"
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
            for starts, img in self.spans.get(rid, ()):
                per = img.num_tokens // img.frames
                for f, start in enumerate(starts):
                    lo, hi = max(start, c.start), min(start + per, end)
                    if lo < hi:
                        wanted.append((rid, offset + lo - c.start, img, f * per + lo - start, hi - lo))
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
            else:  # another request of this step encodes it: an encoding saved, as a cache hit would
                self.hits += 1
        if not todo:
            return
        frames = [img.pixels.reshape(-1, *img.pixels.shape[-3:]) for img in todo.values()]
        rows = self.encoder.encode(torch.from_numpy(np.concatenate(frames)))  # (frames, tokens, hidden)
        split = rows.split([img.frames for img in todo.values()])
        fresh = {h: r.flatten(0, 1) for h, r in zip(todo, split, strict=True)}  # hash -> (image rows, hidden)
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

    def bidirectional(self, c: ScheduledChunk) -> tuple[tuple[int, int], ...]:
        if not self.cfg.bidirectional:
            return ()
        end = c.start + c.num_new_tokens
        return tuple((s, e) for s, e in self._runs(c.request) if s < end and e > c.start)

    def check_budget(self, max_num_tokens: int) -> None:
        if self.cfg.bidirectional and max_num_tokens < self.cfg.tokens_per_image:
            raise UserError(
                f"max_num_tokens {max_num_tokens} is below the {self.cfg.tokens_per_image} tokens of one image, "
                "which this model runs in one chunk (its rows attend to each other); raise max_num_tokens"
            )

    def chunk_tokens(self, r: Request, start: int, n: int) -> int:
        if self.cfg.bidirectional:
            for s, e in self._runs(r):
                if s < start + n < e:
                    return max(0, s - start)  # up to the image; one that started earlier waits to run whole
        return n

    def _runs(self, r: Request) -> list[tuple[int, int]]:
        """[start, end) positions of each frame's rows of r's images."""
        out = []
        for starts, img in self.spans.get(r.seq.request, ()):
            per = img.num_tokens // img.frames
            out += [(s, s + per) for s in starts]
        return out

    def stats(self) -> VisionStats:
        return VisionStats(self.encoded, self.hits, self.misses, len(self.cache), self.cache_bytes)


def model_features(engine) -> list[EngineFeature]:
    """The features a loaded engine's model brings: LongRoPE's keying (features/long_rope.py) where its rope
    has one, and its vision encoder's (runtime/loader.py: the null object for a text-only model)."""
    return [*long_rope_scopes(engine.model), engine.vision]
