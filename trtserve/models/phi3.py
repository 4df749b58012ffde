"""Phi-3 / Phi-3.5 / Phi-4-mini family: Llama's layout, stored with q, k and v fused in one `qkv_proj` and
the MLP's gate and up in one `gate_up_proj` (split by the converter: Names.fused), RoPE over the first
`partial_rotary_factor` of each head (Phi-4-mini), LongRoPE where `rope_scaling` asks for it."""

from trtserve.models import llama
from trtserve.models.family import DecoderFamily, GGUFNames
from trtserve.models.features import (
    LONG_ROPE,
    PARTIAL_ROTARY,
    ROPE_SCALING,
    SLIDING_WINDOW,
    TIED_EMBEDDINGS,
)
from trtserve.models.layout import LLAMA, Names

QKV, GATE_UP = ("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")  # in their fused modules' row order


def _fused_names(base: Names, qkv: str, gate_up: str) -> Names:
    """base's names with q/k/v read from one fused module and gate/up from another."""
    layer = base.layer | dict.fromkeys(QKV, qkv) | dict.fromkeys(GATE_UP, gate_up)
    return Names(base.model, base.layer_prefix, layer, fused={qkv: QKV, gate_up: GATE_UP})


HF_NAMES = _fused_names(llama.HF_NAMES, "self_attn.qkv_proj", "mlp.gate_up_proj")
GGUF_NAMES = _fused_names(llama.GGUF_NAMES, "attn_qkv", "ffn_up")  # llama.cpp keeps both fusions

FAMILY = DecoderFamily(
    name="phi3",
    hf_architectures=("Phi3ForCausalLM",),
    trtllm_architecture="Phi3ForCausalLM",
    layout=LLAMA,
    hf=HF_NAMES,
    # llama.cpp rotates Phi-3 as NeoX (rows unpermuted); its LongRoPE factors are tensors, read as config
    gguf=GGUFNames(
        "phi3",
        GGUF_NAMES,
        permuted_qk=False,
        config_keys={
            "original_max_position_embeddings": "rope.scaling.original_context_length",
            "sliding_window": "attention.sliding_window",  # 0: none (Phi-4-mini)
        },
    ),
    features=llama.FEATURES,
    config_features=frozenset({TIED_EMBEDDINGS, ROPE_SCALING, LONG_ROPE, PARTIAL_ROTARY, SLIDING_WINDOW}),
    backends=frozenset({"torch", "trtllm"}),  # trtllm: on the releases backends/tensorrt_llm/model_support.py names
    quant_formats=None,  # every format: tests/golden/test_quant_families.py, test_gguf_families.py
)
