"""Tiny random vision-language checkpoints made in the test, with a tokenizer holding an <image> token, a chat
template that writes it for image parts, and the image processor's config: LLaVA (CLIP or SigLIP tower over
a Llama / Qwen2 / Mistral text model), Idefics3 (SmolVLM's architecture, over Llama, SmolVLM's template) and
Gemma 3 (SigLIP tower, pooling projector, over Gemma 3 text, Gemma 3's template); HF's processor for each;
and random images."""

from __future__ import annotations

import json
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
# the structure of llava-hf/llava-interleave-qwen-0.5b-hf's template: a message's images first, then its text
LLAVA_HF_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] }}{% endfor %}"
    "{{'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
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
    dest: Path,
    text: str = "llama",
    tower: str = "clip",
    layer=-2,
    select: str = "default",
    seed: int = 0,
    template: str = VISION_TEMPLATE,
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
    tok.chat_template = template
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


IDEFICS3_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"] + [
    f"<row_{r}_col_{c}>" for r in (1, 2) for c in (1, 2)
]  # the processor's and the tags of a grid of at most 2 x 2 tiles (longest_edge = 2 tiles)
IDEFICS3_TILE = 28
# SmolVLM's template (HuggingFaceTB/SmolVLM-Instruct): it reads every message's content as parts
IDEFICS3_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def make_idefics3(dest: Path, seed: int = 0) -> Path:
    """A random float32 Idefics3ForConditionalGeneration (4 rows a tile) saved with tokenizer and processor."""
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessorPil,
        LlamaConfig,
        PreTrainedTokenizerFast,
    )

    dest.mkdir(parents=True, exist_ok=True)
    write_tokenizer(dest)
    tok = PreTrainedTokenizerFast.from_pretrained(dest)
    tok.add_special_tokens({"additional_special_tokens": IDEFICS3_TOKENS})
    tok.chat_template = IDEFICS3_TEMPLATE
    tok.save_pretrained(dest)
    torch.manual_seed(seed)
    tower = dict(TOWER, image_size=IDEFICS3_TILE, patch_size=7, hidden_act="gelu_pytorch_tanh")
    cfg = Idefics3Config(
        vision_config=tower,
        text_config=LlamaConfig(**TEXT, tie_word_embeddings=False),
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        scale_factor=2,
        tie_word_embeddings=False,
    )
    model = Idefics3ForConditionalGeneration(cfg).to(torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.add_(0.3 * torch.randn_like(p))
            if "connector" in name:
                p.mul_(8.0)
    model.save_pretrained(dest)
    proc = Idefics3ImageProcessorPil(
        size={"longest_edge": 2 * IDEFICS3_TILE}, max_image_size={"longest_edge": IDEFICS3_TILE}
    )
    proc.save_pretrained(dest)
    return dest


# Gemma 3's template (google/gemma-3-4b-it): the system text opens the first user turn, an image part writes
# <start_of_image> right after "user\n" (which HF's processor then puts beside "\n\n")
GEMMA3_TEMPLATE = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- if messages[0]['content'] is string -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- else -%}"
    "{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}{%- endif -%}"
    "{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}{%- endif -%}{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'assistant') -%}{%- set role = 'model' -%}{%- else -%}"
    "{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}{%- else -%}"
    "{%- for item in message['content'] -%}{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<end_of_turn>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{'<start_of_turn>model\n'}}{%- endif -%}"
)
GEMMA3_TOKENS = ["<start_of_image>", "<end_of_image>", "<image_soft_token>", "<start_of_turn>", "<end_of_turn>"]


def _merge_newlines(dest: Path) -> None:
    """Gemma's tokenizer has a token for each run of newlines; the tiny one gets "\n\n" and "\n\n\n"."""
    f = dest / "tokenizer.json"
    raw = json.loads(f.read_text())
    vocab, merges = raw["model"]["vocab"], raw["model"]["merges"]
    for run in ("ĊĊ", "ĊĊĊ"):  # byte-level "\n" is "Ċ"
        vocab[run] = len(vocab)
        merges.append([run[:-1], "Ċ"])
    f.write_text(json.dumps(raw))


def make_gemma3(dest: Path, window: int = 8, seed: int = 0) -> Path:
    """A random float32 Gemma3ForConditionalGeneration (4 soft tokens an image, sliding and global layers)."""
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3ImageProcessorPil,
        Gemma3TextConfig,
        PreTrainedTokenizerFast,
    )

    dest.mkdir(parents=True, exist_ok=True)
    write_tokenizer(dest)
    _merge_newlines(dest)
    tok = PreTrainedTokenizerFast.from_pretrained(dest)
    tok.add_special_tokens({"additional_special_tokens": GEMMA3_TOKENS})
    tok.chat_template = GEMMA3_TEMPLATE
    tok.save_pretrained(dest)
    ids = tok.convert_tokens_to_ids(["<start_of_image>", "<end_of_image>", "<image_soft_token>"])
    torch.manual_seed(seed)
    text = Gemma3TextConfig(
        **TEXT | dict(num_hidden_layers=4), head_dim=16, query_pre_attn_scalar=24, sliding_window=window,
        layer_types=["sliding_attention", "full_attention"] * 2, tie_word_embeddings=False,
    )  # fmt: skip
    cfg = Gemma3Config(
        text_config=text,
        vision_config=dict(TOWER, image_size=28, patch_size=7, model_type="siglip_vision_model"),
        mm_tokens_per_image=4, boi_token_index=ids[0], eoi_token_index=ids[1], image_token_index=ids[2],
        tie_word_embeddings=False,
    )  # fmt: skip
    model = Gemma3ForConditionalGeneration(cfg).to(torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.add_(0.3 * torch.randn_like(p))
            if "multi_modal_projector" in name:
                p.add_(0.3 * torch.randn_like(p)).mul_(8.0)  # its projection starts as zeros
    model.save_pretrained(dest)
    Gemma3ImageProcessorPil(size={"height": 28, "width": 28}).save_pretrained(dest)
    return dest


def hf_processor(family: str, src: Path):
    """HF's processor for a tiny checkpoint of a vision family made here (its tokenizer's chat template)."""
    import transformers
    from transformers import AutoTokenizer

    if family == "gemma3":
        special = dict(boi_token="<start_of_image>", eoi_token="<end_of_image>", image_token="<image_soft_token>")
        tok = AutoTokenizer.from_pretrained(src, **special)
        images = transformers.Gemma3ImageProcessorPil.from_pretrained(src)
        return transformers.Gemma3Processor(images, tok, image_seq_length=4, chat_template=tok.chat_template)
    tok = AutoTokenizer.from_pretrained(src)
    if family == "idefics3":
        images = transformers.Idefics3ImageProcessorPil.from_pretrained(src)
        return transformers.Idefics3Processor(images, tok, image_seq_len=4, chat_template=tok.chat_template)
    images = transformers.CLIPImageProcessorPil.from_pretrained(src)
    return transformers.LlavaProcessor(
        images, tok, patch_size=14, vision_feature_select_strategy="default", num_additional_image_tokens=1,
        chat_template=tok.chat_template,
    )  # fmt: skip


def random_image(seed: int, size=(61, 47)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
