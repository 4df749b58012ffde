"""Tiny random checkpoints built from configs in the test itself (no downloads)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A model server turns checkpoints into engines and serves them.",
    "Paged attention keeps the KV cache in fixed-size blocks.",
    "Continuous batching lets requests join and leave at every step.",
    "Héllo wörld, naïve café; 東京 and 北京 are cities. 🙂",
] * 20
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
VOCAB = 320
# the tiny decoder of the pooling tests (embedders, classifiers, rerankers): its pad id 2 is never in their
# prompts (random_prompts draws ids from 3), so HF's classifier pools the last token
POOLING_SHAPE = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    initializer_range=0.2,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=2,
)


@functools.cache
def _tokenizer_files() -> dict[str, str]:
    import tempfile

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - 8,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    with tempfile.TemporaryDirectory() as d:
        fast.save_pretrained(d)
        return {p.name: p.read_text() for p in Path(d).iterdir()}


def write_tokenizer(dest: Path) -> None:
    for name, text in _tokenizer_files().items():
        (dest / name).write_text(text)


def tiny_config(arch: str = "llama", **overrides):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    common = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.2,  # peaked logits: greedy ties would make comparisons meaningless
        bos_token_id=0,
        eos_token_id=1,
    )
    cls = {"llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config}[arch]
    return cls(**(common | overrides))


def make_hf_model(
    dest: Path, arch: str = "llama", seed: int = 0, dtype: torch.dtype = torch.float32, **overrides
) -> Path:
    """Save a random model of `arch` with `overrides` to dest (safetensors + tokenizer)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = tiny_config(arch, **overrides)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    write_tokenizer(dest)
    return dest


def hf_greedy(
    model_dir: Path, prompts: list[list[int]], max_new_tokens: int, dtype=torch.float32, device="cpu", **kw
) -> list[list[int]]:
    """HF transformers' greedy generate, one prompt at a time, never stopping at EOS."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **kw).to(device).eval()
    return greedy_of(model, prompts, max_new_tokens, device)


def greedy_of(model, prompts: list[list[int]], max_new_tokens: int, device="cpu") -> list[list[int]]:
    """A loaded HF model's greedy generate, one prompt at a time, exactly max_new_tokens each."""
    outs = []
    with torch.inference_mode():
        for p in prompts:
            ids = torch.tensor([p], device=device)
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                min_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
            outs.append(out[0, len(p) :].tolist())
    return outs


def random_prompts(n: int, seed: int = 0, lo: int = 3, hi: int = 40, vocab: int = VOCAB) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi, (n,), generator=g).tolist()
    return [torch.randint(3, vocab, (k,), generator=g).tolist() for k in lens]


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def _permute(w, heads: int):
    """llama.cpp's q/k row permutation (convert_hf_to_gguf.py's LlamaModel.permute)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(hf_dir: Path, dest: Path, raw_types: dict | None = None) -> Path:
    """Write a llama GGUF of the HF model at hf_dir, as llama.cpp's converter lays it out.

    raw_types: {gguf tensor name: GGMLQuantizationType} written as zero bytes of that type.
    """
    import gguf
    import numpy as np
    from safetensors.torch import load_file

    cfg = read_json(hf_dir / "config.json")
    sd = {k: v.float().numpy() for k, v in load_file(hf_dir / "model.safetensors").items()}
    tok = read_json(hf_dir / "tokenizer.json")
    w = gguf.GGUFWriter(str(dest), "llama")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg.get("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    w.add_tokenizer_model("gpt2")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([3 if t.startswith("<") and t.endswith(">") else 1 for t, _ in vocab])
    merges = tok["model"]["merges"]
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    raw_types = raw_types or {}
    for name, arr in sd.items():
        if name.startswith("model.layers."):
            i, rest = name[len("model.layers.") :].split(".", 1)
            mod = rest.rsplit(".", 1)[0]
            gname = f"blk.{i}.{per_layer[mod]}.weight"
            if mod == "self_attn.q_proj":
                arr = _permute(arr, cfg["num_attention_heads"])
            elif mod == "self_attn.k_proj":
                arr = _permute(arr, cfg["num_key_value_heads"])
        else:
            gname = names[name]
        if gname in raw_types:
            qt = raw_types[gname]
            block, size = gguf.GGML_QUANT_SIZES[qt]
            raw = np.zeros((arr.shape[0], arr.shape[1] // block * size), dtype=np.uint8)
            w.add_tensor(gname, raw, raw_shape=raw.shape, raw_dtype=qt)
        else:
            w.add_tensor(gname, np.ascontiguousarray(arr, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dest


def make_lora_adapter(
    base_dir: Path, dest: Path, targets: tuple[str, ...], r: int, alpha: float, rslora: bool = False, seed: int = 0
) -> Path:
    """Save a random PEFT LoRA adapter (A and B both random, unlike PEFT's zero-B init) for the model at base_dir."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    torch.manual_seed(seed)
    cfg = LoraConfig(
        r=r,
        lora_alpha=alpha,
        target_modules=list(targets),
        use_rslora=rslora,
        init_lora_weights=False,
        lora_dropout=0.0,
    )
    get_peft_model(model, cfg).save_pretrained(dest)
    return dest


def peft_greedy(base_dir: Path, adapter_dir: Path, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """HF transformers + PEFT greedy generate (float32, CPU), one prompt at a time, never stopping at EOS."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter_dir).eval()
    return greedy_of(model, prompts, max_new_tokens)
