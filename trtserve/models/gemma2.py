"""Gemma 2 family, and the layers Gemma 3 (gemma3.py) shares: local (sliding-window) and global layers by HF
`layer_types` (or the older `sliding_window_pattern`), four RMSNorms a layer with the (1 + weight) convention
(the attention's and the MLP's outputs normed before their residual adds), GeGLU (gelu_pytorch_tanh),
embeddings scaled by sqrt(hidden) in the model dtype, attention scaled by `query_pre_attn_scalar` ** -0.5,
attention scores and logits soft-capped where the config says (Gemma 2's does by default)."""

from trtserve.engine.errors import UserError
from trtserve.models import llama
from trtserve.models.family import DecoderFamily, GGUFNames, layer_windows
from trtserve.models.features import (
    ATTN_SOFTCAP,
    FINAL_SOFTCAP,
    GELU_TANH_GATED_MLP,
    LAYER_WINDOWS,
    OFFSET_NORM,
    RMS_NORM,
    ROPE_NEOX,
    ROPE_SCALING,
    SANDWICH_NORMS,
    SCALED_EMBEDDINGS,
    SLIDING_WINDOW,
    TIED_EMBEDDINGS,
)
from trtserve.models.layout import LLAMA, Layout, Names, Source, Target

NORMS = ("input_norm", "attn_out_norm", "post_norm", "mlp_out_norm")  # post_norm: the MLP's input norm

# Llama's table plus the attention's and the MLP's output norms (TensorRT-LLM's Gemma 2 names).
GEMMA2_LAYOUT = Layout(
    model=LLAMA.model,
    layer=LLAMA.layer | {"attn_out_norm": Source(("hidden_size",)), "mlp_out_norm": Source(("hidden_size",))},
    trtllm_model=LLAMA.trtllm_model,
    trtllm_prefix=LLAMA.trtllm_prefix,
    trtllm_layer=LLAMA.trtllm_layer
    | {
        "attn_out_norm": Target("post_layernorm", ("attn_out_norm",)),
        "post_norm": Target("pre_feedforward_layernorm", ("post_norm",)),
        "mlp_out_norm": Target("post_feedforward_layernorm", ("mlp_out_norm",)),
    },
    engine_layer=LLAMA.engine_layer,
)
_HF_NORMS = {
    "attn_out_norm": "post_attention_layernorm",
    "post_norm": "pre_feedforward_layernorm",
    "mlp_out_norm": "post_feedforward_layernorm",
}
_GGUF_NORMS = {"attn_out_norm": "post_attention_norm", "post_norm": "ffn_norm", "mlp_out_norm": "post_ffw_norm"}
GEMMA2_HF = Names(llama.HF_NAMES.model, llama.HF_NAMES.layer_prefix, llama.HF_NAMES.layer | _HF_NORMS)
GEMMA2_GGUF = Names(llama.GGUF_NAMES.model, llama.GGUF_NAMES.layer_prefix, llama.GGUF_NAMES.layer | _GGUF_NORMS)
# llama.cpp's converter stores each Gemma norm weight plus one (its graph multiplies by the weight);
# llama.cpp scales attention by key_length ** -0.5 (query_pre_attn_scalar = head_dim; not so for the 27B
# models, whose GGUFs this misreads) and writes the window, the soft-caps and the global RoPE base.
GGUF_KEYS = {"sliding_window": "attention.sliding_window", "query_pre_attn_scalar": "attention.key_length"}
_SOFTCAPS = {"attn_logit_softcapping": "attn_logit_softcapping", "final_logit_softcapping": "final_logit_softcapping"}


def gemma_config(hf) -> dict:
    if getattr(hf, "use_bidirectional_attention", False):
        raise UserError("Gemma with use_bidirectional_attention is an encoder, not a decoder trtserve builds")
    caps = {k: getattr(hf, k, None) for k in _SOFTCAPS}
    return {
        "layer_windows": layer_windows(hf),
        "norm_weight_offset": 1.0,
        "embedding_multiplier": hf.hidden_size**0.5,  # rounded to the model dtype at load (SCALED_EMBEDDINGS)
        "attention_multiplier": hf.query_pre_attn_scalar**-0.5,
    } | {k: float(v) for k, v in caps.items() if v is not None}


FEATURES = frozenset({RMS_NORM, OFFSET_NORM, SANDWICH_NORMS, ROPE_NEOX, GELU_TANH_GATED_MLP, SCALED_EMBEDDINGS})
CONFIG_FEATURES = frozenset({TIED_EMBEDDINGS, ROPE_SCALING, SLIDING_WINDOW, LAYER_WINDOWS, ATTN_SOFTCAP, FINAL_SOFTCAP})

FAMILY = DecoderFamily(
    name="gemma2",
    hf_architectures=("Gemma2ForCausalLM",),
    trtllm_architecture="Gemma2ForCausalLM",
    layout=GEMMA2_LAYOUT,
    hf=GEMMA2_HF,
    gguf=GGUFNames(
        "gemma2",
        GEMMA2_GGUF,
        permuted_qk=False,
        config_keys=GGUF_KEYS | _SOFTCAPS,
        config_values={"sliding_window_pattern": 2},  # llama.cpp's graph: every other layer is local
        weight_offsets=dict.fromkeys((*NORMS, "final_norm"), 1.0),
    ),
    features=FEATURES,
    config_features=CONFIG_FEATURES,
    config_extras=gemma_config,
    backends=frozenset({"torch", "trtllm"}),  # trtllm: on the releases backends/tensorrt_llm/model_support.py names
    quant_formats=None,  # every format: tests/golden/test_quant_families.py, test_gguf_families.py
)
