"""Tiny random LLaVA checkpoints made in the test (CLIP or SigLIP tower over a Llama / Qwen2 / Mistral text
model), with a tokenizer holding an <image> token, a chat template that writes it for image parts, and a
CLIP / SigLIP image processor config; and random images."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from helpers import VOCAB, write_tokenizer
from PIL import Image

VISION_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'image' %}<image>{% else %}{{ p['text'] }}{% endif %}{% endfor %}{% endif %}</s>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

TEXT = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.2, bos_token_id=0, eos_token_id=1,
    pad_token_id=None,
)  # fmt: skip
TOWER = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, image_size=56, patch_size=14
)


def make_llava(
    dest: Path, text: str = "llama", tower: str = "clip", layer=-2, select: str = "default", seed: int = 0
) -> Path:
    """A random float32 LlavaForConditionalGeneration saved with tokenizer and image processor config."""
    from transformers import (
        AutoConfig,
        CLIPImageProcessor,
        LlavaConfig,
        LlavaForConditionalGeneration,
        PreTrainedTokenizerFast,
        SiglipImageProcessor,
    )

    dest.mkdir(parents=True, exist_ok=True)
    write_tokenizer(dest)
    tok = PreTrainedTokenizerFast.from_pretrained(dest)
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    tok.chat_template = VISION_TEMPLATE
    tok.save_pretrained(dest)
    image_id = tok.convert_tokens_to_ids("<image>")
    torch.manual_seed(seed)
    vision = AutoConfig.for_model(f"{tower}_vision_model", **TOWER)
    cfg = LlavaConfig(
        vision_config=vision,
        text_config=AutoConfig.for_model(text, **TEXT),
        image_token_index=image_id,
        vision_feature_layer=layer,
        vision_feature_select_strategy=select,
        projector_hidden_act="gelu",
    )
    model = LlavaForConditionalGeneration(cfg).to(torch.float32).eval()
    with torch.no_grad():  # norms start as ones: random weights tell them apart and apply them
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.add_(0.3 * torch.randn_like(p))
            if "multi_modal_projector" in name:
                p.mul_(8.0)  # image rows large enough to change greedy tokens
    model.save_pretrained(dest)
    size = TOWER["image_size"]
    if tower == "clip":
        proc = CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    else:
        proc = SiglipImageProcessor(size={"height": size, "width": size})
    proc.save_pretrained(dest)
    return dest


def random_image(seed: int, size=(61, 47)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
