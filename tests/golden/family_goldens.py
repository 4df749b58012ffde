"""Shared checks of the test_family_<name>.py goldens: a tiny random checkpoint of a family made in the
test, built from safetensors (and GGUF, written as llama.cpp's converter lays it out), whose float32
greedy output equals HF transformers' token for token alone, batched, with chunked prefill, prefix
reuse and preemption; logprobs within the existing goldens' tolerance."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import VOCAB, greedy_of, random_prompts, read_json, write_tokenizer
from safetensors.torch import load_file

from trtserve import LLM, SamplingParams
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.engine.model_config import ModelConfig
from trtserve.kernels import decode_layers

NEW_TOKENS = 24
GREEDY = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
COMMON = dict(
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
    pad_token_id=None,  # some families' defaults lie outside the tiny vocabulary
)


def make_model(dest: Path, model_type: str, seed: int = 0, **overrides) -> Path:
    """Save a random float32 model of transformers' `model_type` (safetensors + tokenizer) to dest."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(model_type, **(COMMON | overrides))
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # norms start as ones: random weights tell q's from k's and apply them
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.3 * torch.randn_like(p))
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    write_tokenizer(dest)
    return dest


def build(src: Path, out: Path, **cfg) -> Path:
    build_engine(BuildConfig(model=str(src), tokens_per_block=16, **cfg), out, quiet=True)
    return out


def hf_model(src: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()


def assert_greedy_equals_hf(engine: Path, src: Path, seed: int = 1) -> None:
    """Greedy tokens equal HF's: each prompt alone, all together, with the prompts chunked (16 tokens a
    step) and run twice (the second time from the prefix cache), and under preemption."""
    prompts = random_prompts(6, seed=seed, lo=1, hi=70)
    expected = greedy_of(hf_model(src), prompts, NEW_TOKENS)
    llm = LLM(engine, kv_cache_memory=16 << 20, enable_prefix_caching=False)
    assert [llm.generate([p], GREEDY)[0].token_ids for p in prompts] == expected, "alone"
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == expected, "batched"
    chunked = LLM(engine, kv_cache_memory=16 << 20, max_num_tokens=16, enable_prefix_caching=True)
    outs = chunked.generate(prompts + prompts[:3], GREEDY)
    assert [o.token_ids for o in outs] == expected + expected[:3], "chunked prefill and prefix reuse"
    assert chunked.core.stats().prefix_cache.hits > 0 and any(o.num_cached_tokens > 0 for o in outs[6:])
    per_token = ModelConfig(**read_json(engine / "config.json")["pretrained_config"]).kv_bytes_per_token()
    tight = LLM(engine, kv_cache_memory=12 * 16 * per_token, capacity_policy="max_utilization", max_num_tokens=64)
    assert [o.token_ids for o in tight.generate(prompts, GREEDY)] == expected, "preemption"
    assert tight.core.stats().scheduler.preemptions > 0


def assert_logprobs_equal_hf(engine: Path, src: Path) -> None:
    """Prompt and sampled-token logprobs within 1e-4 of HF's log-softmax (the prompt in 3 chunks)."""
    llm = LLM(engine, kv_cache_memory=16 << 20, max_num_tokens=16)
    prompt = random_prompts(1, seed=9, lo=40, hi=41)[0]
    params = SamplingParams(max_tokens=4, temperature=0.0, logprobs=3, prompt_logprobs=2, ignore_eos=True)
    out = llm.generate([prompt], params)[0]
    with torch.inference_mode():
        logp = torch.log_softmax(hf_model(src)(torch.tensor([prompt + out.token_ids])).logits[0].float(), dim=-1)
    for pos in range(1, len(prompt)):
        assert out.prompt_logprobs[pos].logprob == pytest.approx(float(logp[pos - 1, prompt[pos]]), abs=1e-4)
    for k, (tok, lp) in enumerate(zip(out.token_ids, out.outputs[0].logprobs, strict=True)):
        assert lp.logprob == pytest.approx(float(logp[len(prompt) - 1 + k, tok]), abs=1e-4)


def assert_fast_paths_refused(engine: Path) -> None:
    """The family's layer features are ones the C decode step and pointwise kernels lack: torch ops run."""
    model = LLM(engine, device="cpu", kv_cache_memory=16 << 20).engine.model
    assert model.step_weights is None and not model.use_pointwise


def assert_decode_step_runs(engine: Path, monkeypatch) -> None:
    """The family's layer features are all ones the C decode step and pointwise kernels implement: its
    decode steps run as the one-call step (where this machine builds the kernels)."""
    if decode_layers.load() is None:
        pytest.skip("the decode step needs x86-64 with AVX2/FMA/F16C and a C compiler")
    llm = LLM(engine, device="cpu", kv_cache_memory=16 << 20)
    model = llm.engine.model
    assert model.step_weights is not None and model.use_pointwise
    ran = counting_step_runs(monkeypatch)
    llm.generate(random_prompts(2, seed=6), GREEDY)
    assert ran[0] >= NEW_TOKENS - 1


def counting_step_runs(monkeypatch) -> list[int]:
    """decode_layers.run patched to count the decode steps the kernel ran: [count], read after the calls."""
    ran, real_run = [0], decode_layers.run

    def counting_run(*args, **kwargs):
        ok = real_run(*args, **kwargs)
        ran[0] += ok
        return ok

    monkeypatch.setattr(decode_layers, "run", counting_run)
    return ran


def step_outputs(llm: LLM, prompts: list[list[int]], params: SamplingParams, step: bool, monkeypatch):
    """(greedy tokens and logprobs per prompt, how many decode steps the kernel ran), the one-call step on or off."""
    model = llm.engine.model
    table, ran = model.step_weights, counting_step_runs(monkeypatch)
    model.step_weights = table if step else None
    try:
        outs = llm.generate(prompts, params)
    finally:
        model.step_weights = table
    seqs = [o.outputs[0] for o in outs]
    return [(s.token_ids, [(lp.logprob, lp.top) for lp in s.logprobs]) for s in seqs], ran[0]


def assert_windows_matter(engine: Path, src: Path) -> None:
    """The checkpoint's windowed layers change its output on these prompts: with every layer attending to
    every key, the engine's greedy tokens leave HF's (so the goldens above do test the windows)."""
    from dataclasses import replace

    prompts = random_prompts(6, seed=1, lo=1, hi=70)
    expected = greedy_of(hf_model(src), prompts, NEW_TOKENS)
    llm = LLM(engine, kv_cache_memory=16 << 20)
    model = llm.engine.model
    assert any(a.window is not None for a in model.attention)
    model.attention = [replace(a, window=None) for a in model.attention]
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] != expected


def assert_speculative_greedy_equals_hf(engine: Path, src: Path) -> None:
    """Greedy tokens equal HF's under n-gram speculation (repetitive prompts: proposals verified, some kept)
    and with the engine as its own draft model (every proposal kept), windows and all."""
    prompts = [(p * 8)[:72] for p in random_prompts(4, seed=5, lo=3, hi=9)]
    expected = greedy_of(hf_model(src), prompts, NEW_TOKENS)
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "max_batch_size": 8}
    draft = {"method": "draft_model", "num_speculative_tokens": 3, "draft_engine_dir": str(engine)}
    for spec in (ngram, draft):
        llm = LLM(engine, kv_cache_memory=16 << 20, speculative=spec)
        assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == expected, spec["method"]
        assert llm.core.stats().spec.accepted_tokens > 0, spec["method"]


# llama.cpp's tensor names (gguf-py's TENSOR_NAMES) for HF's modules
_GGUF_GLOBAL = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
_GGUF_LAYER = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.qkv_proj": "attn_qkv",  # Phi-3's fused modules, kept fused
    "mlp.gate_up_proj": "ffn_up",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "mlp.gate": "ffn_gate_inp",  # the experts' router; their tensors merged by _merge_experts
    "mlp.experts.gate_proj": "ffn_gate_exps",
    "mlp.experts.up_proj": "ffn_up_exps",
    "mlp.experts.down_proj": "ffn_down_exps",
    "mlp.shared_expert.gate_proj": "ffn_gate_shexp",  # Qwen2-MoE's shared expert and its gate
    "mlp.shared_expert.up_proj": "ffn_up_shexp",
    "mlp.shared_expert.down_proj": "ffn_down_shexp",
    "mlp.shared_expert_gate": "ffn_gate_inp_shexp",
}


def _merge_experts(sd: dict) -> dict:
    """Each layer's per-expert tensors (mlp.experts.{e}.gate_proj.weight) stacked into one
    (mlp.experts.gate_proj.weight: (experts, out, in)), as llama.cpp's converter merges them."""
    import re

    import numpy as np

    out, groups = {}, {}
    for name, arr in sd.items():
        m = re.fullmatch(r"(.*\.experts)\.(\d+)\.(.*)", name)
        if m:
            groups.setdefault(f"{m[1]}.{m[3]}", {})[int(m[2])] = arr
        else:
            out[name] = arr
    return out | {name: np.stack([e[i] for i in range(len(e))]) for name, e in groups.items()}


def _permute(w, heads: int):
    """llama.cpp's q/k row permutation (convert_hf_to_gguf.py's LlamaModel.permute)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(
    hf_dir: Path,
    dest: Path,
    arch: str,
    permute: bool,
    floats: dict[str, float] | None = None,
    extra=None,
    layer_names: dict[str, str] | None = None,
    norm_offset: float = 0.0,
) -> Path:
    """A float32 GGUF of the HF model at hf_dir as llama.cpp's converter writes `arch`: its tensor names
    (layer_names: HF module -> llama.cpp's, where the architecture's differ from _GGUF_LAYER), q/k rows
    permuted where it permutes them, norm weights plus norm_offset (Gemma's: 1), head_dim as key_length,
    `floats` as `{arch}.{key}` metadata; extra(writer) adds what else the architecture's converter writes."""
    import gguf
    import numpy as np

    cfg = read_json(hf_dir / "config.json")
    sd = _merge_experts({k: v.float().numpy() for k, v in load_file(hf_dir / "model.safetensors").items()})
    tok = read_json(hf_dir / "tokenizer.json")
    w = gguf.GGUFWriter(str(dest), arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    rope = cfg.get("rope_parameters") or {}
    rope = rope.get("full_attention", rope)  # per layer type (Gemma 3): the global layers' base
    w.add_rope_freq_base(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    for key, value in (floats or {}).items():
        w.add_float32(f"{arch}.{key}", value)
    if extra is not None:
        extra(w)
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    w.add_tokenizer_model("gpt2")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([3 if t.startswith("<") and t.endswith(">") else 1 for t, _ in vocab])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]])
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    heads = {"self_attn.q_proj": cfg["num_attention_heads"], "self_attn.k_proj": cfg["num_key_value_heads"]}
    for name, arr in sd.items():
        module, suffix = name.rsplit(".", 1)
        if module.startswith("model.layers."):
            i, rest = module[len("model.layers.") :].split(".", 1)
            gname = f"blk.{i}.{(layer_names or {}).get(rest) or _GGUF_LAYER[rest]}.{suffix}"
            if permute and rest in heads:
                arr = _permute(arr, heads[rest])
        else:
            gname = f"{_GGUF_GLOBAL[module]}.{suffix}"
        if name.endswith("norm.weight"):
            arr = arr + norm_offset
        w.add_tensor(gname, np.ascontiguousarray(arr, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dest


def assert_gguf_greedy_equals_hf(gguf_file: Path, src: Path, out: Path) -> None:
    """The GGUF's engine generates HF's greedy tokens of the checkpoint it was written from, batched."""
    prompts = random_prompts(4, seed=4, lo=1, hi=50)
    expected = greedy_of(hf_model(src), prompts, NEW_TOKENS)
    llm = LLM(build(gguf_file, out), kv_cache_memory=16 << 20)
    assert [o.token_ids for o in llm.generate(prompts, GREEDY)] == expected
