"""Llama family: GQA, tied embeddings, head_dim override, rope scaling (incl. llama3). Its HF and
GGUF names are the ones Mistral and Qwen2 use too."""

from trtserve.models.family import DecoderFamily, GGUFNames
from trtserve.models.features import (
    MLP_BIAS,
    QKV_BIAS,
    RMS_NORM,
    ROPE_NEOX,
    ROPE_SCALING,
    SILU_GATED_MLP,
    TIED_EMBEDDINGS,
)
from trtserve.models.layout import EMBED, LLAMA, LM_HEAD, Names

HF_NAMES = Names(
    model={EMBED: "model.embed_tokens", "final_norm": "model.norm", LM_HEAD: "lm_head"},
    layer_prefix="model.layers.{i}.",
    layer={
        "input_norm": "input_layernorm",
        "q_proj": "self_attn.q_proj",
        "k_proj": "self_attn.k_proj",
        "v_proj": "self_attn.v_proj",
        "o_proj": "self_attn.o_proj",
        "post_norm": "post_attention_layernorm",
        "gate_proj": "mlp.gate_proj",
        "up_proj": "mlp.up_proj",
        "down_proj": "mlp.down_proj",
    },
)
GGUF_NAMES = Names(
    model={EMBED: "token_embd", "final_norm": "output_norm", LM_HEAD: "output"},
    layer_prefix="blk.{i}.",
    layer={
        "input_norm": "attn_norm",
        "q_proj": "attn_q",
        "k_proj": "attn_k",
        "v_proj": "attn_v",
        "o_proj": "attn_output",
        "post_norm": "ffn_norm",
        "gate_proj": "ffn_gate",
        "up_proj": "ffn_up",
        "down_proj": "ffn_down",
    },
)
FEATURES = frozenset({RMS_NORM, ROPE_NEOX, SILU_GATED_MLP})
CONFIG_FEATURES = frozenset({QKV_BIAS, MLP_BIAS, TIED_EMBEDDINGS, ROPE_SCALING})

FAMILY = DecoderFamily(
    name="llama",
    hf_architectures=("LlamaForCausalLM",),
    trtllm_architecture="LlamaForCausalLM",
    layout=LLAMA,
    hf=HF_NAMES,
    gguf=GGUFNames("llama", GGUF_NAMES, permuted_qk=True),
    features=FEATURES,
    config_features=CONFIG_FEATURES,
)
