"""Prompts with images for the vision goldens (tests/vision_models.py makes the checkpoints), HF's greedy
tokens for them, and a driver that runs them on our engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from vision_models import make_gemma3, make_idefics3, make_llava, random_image  # noqa: F401 (the tests import them)

from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.engine.manifest import read_manifest
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams
from trtserve.engine.tokenizer import Tokenizer
from trtserve.engine.vision import ImageInput
from trtserve.vision.pixels import image_input
from trtserve.vision.prompt import image_text

NEW_TOKENS = 12
GREEDY = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)


def build(src: Path, out: Path, **cfg) -> Path:
    build_engine(BuildConfig(model=str(src), tokens_per_block=16, **cfg), out, quiet=True)
    return out


def images_for(engine: Path, seeds: list[int]) -> list[ImageInput]:
    vision = read_manifest(engine).vision
    return [image_input(random_image(s), vision) for s in seeds]


def prompt_with(engine: Path, images: list[ImageInput], seed: int, text_len: int = 9) -> list[int]:
    """Text, then each image's tokens (its text as the model's processor writes it) and more text after it."""
    vision = read_manifest(engine).vision
    tok = Tokenizer(engine / "tokenizer")
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 300, (text_len,), generator=g).tolist()
    for img in images:
        ids += tok.encode(image_text(img, vision), add_special_tokens=False)
        ids += torch.randint(3, 300, (5,), generator=g).tolist()
    return ids


def hf_greedy(src: Path, prompts: list[tuple[list[int], list[ImageInput]]]) -> list[list[int]]:
    import transformers
    from transformers import AutoConfig

    arch = AutoConfig.from_pretrained(src).architectures[0]
    model = getattr(transformers, arch).from_pretrained(src, dtype=torch.float32).eval()
    outs = []
    with torch.inference_mode():
        for ids, imgs in prompts:
            x = torch.tensor([ids])
            pixels = {"pixel_values": _hf_pixels(imgs)} if imgs else {}
            if getattr(model.config, "mm_tokens_per_image", None):  # Gemma 3: its image rows attend both ways
                pixels["token_type_ids"] = (x == model.config.image_token_index).long()
            out = model.generate(
                input_ids=x, attention_mask=torch.ones_like(x), **pixels, max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0,
            )  # fmt: skip
            outs.append(out[0, len(ids) :].tolist())
    return outs


def _hf_pixels(imgs: list[ImageInput]) -> torch.Tensor:
    """LLaVA's (images, 3, H, W); a tiled model's (1, frames, 3, H, W), every image's tiles in order."""
    if imgs[0].pixels.ndim == 4:
        return torch.from_numpy(np.concatenate([i.pixels for i in imgs]))[None]
    return torch.from_numpy(np.stack([i.pixels for i in imgs]))


def run(llm, prompts: list[tuple[list[int], list[ImageInput]]]) -> tuple[list[list[int]], list[int]]:
    """Our greedy tokens for each (prompt, images), all queued together; and each one's cached prompt tokens."""
    reqs = [GenerateRequest(ids, GREEDY, RequestOptions(images=tuple(imgs))) for ids, imgs in prompts]
    for r in reqs:
        llm.core.check(r)
    for r in reqs:
        llm.core.add_request(r)
    tokens = {r.request_id: [] for r in reqs}
    cached = {}
    while llm.core.has_unfinished():
        for d in llm.core.step():
            assert d.error is None, d.error
            tokens[d.request_id] += d.token_ids
            cached[d.request_id] = d.num_cached_tokens
    return [tokens[r.request_id] for r in reqs], [cached[r.request_id] for r in reqs]
