"""Qwen3 family: Llama's names plus an RMSNorm over each head of q and of k before RoPE, an explicit
head_dim, no q/k/v bias (a config asking for one is refused: Qwen3 would bias o_proj too)."""

from trtserve.models import llama
from trtserve.models.family import DecoderFamily, GGUFNames
from trtserve.models.features import QK_NORM, ROPE_SCALING, TIED_EMBEDDINGS
from trtserve.models.layout import QK_NORMED, Names

HF_NAMES = Names(
    llama.HF_NAMES.model,
    llama.HF_NAMES.layer_prefix,
    llama.HF_NAMES.layer | {"q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"},
)
GGUF_NAMES = Names(
    llama.GGUF_NAMES.model,
    llama.GGUF_NAMES.layer_prefix,
    llama.GGUF_NAMES.layer | {"q_norm": "attn_q_norm", "k_norm": "attn_k_norm"},
)

FAMILY = DecoderFamily(
    name="qwen3",
    hf_architectures=("Qwen3ForCausalLM",),
    trtllm_architecture="Qwen3ForCausalLM",
    layout=QK_NORMED,
    hf=HF_NAMES,
    gguf=GGUFNames("qwen3", GGUF_NAMES, permuted_qk=False),  # llama.cpp converts Qwen3 as Qwen2: unpermuted
    features=llama.FEATURES | {QK_NORM},
    config_features=frozenset({TIED_EMBEDDINGS, ROPE_SCALING}),
    backends=frozenset({"torch", "trtllm"}),  # trtllm: on the releases backends/tensorrt_llm/model_support.py names
    quant_formats=None,  # every format: tests/golden/test_quant_families.py, test_gguf_families.py
)
