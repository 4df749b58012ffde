"""Mixtral family: Mistral's attention with experts in every layer's place of the MLP: a softmax router
over `num_local_experts`, each token's top `num_experts_per_tok` (2 of 8) renormalized."""

from trtserve.models import llama, qwen3_moe
from trtserve.models.family import DecoderFamily, GGUFNames
from trtserve.models.features import MOE, ROPE_SCALING, SLIDING_WINDOW, TIED_EMBEDDINGS
from trtserve.models.layout import LLAMA, Names
from trtserve.models.moe import WEIGHT_ONLY, moe_config, with_experts

EXPERTS_HF = {
    "router": "block_sparse_moe.gate",
    "expert_gate_proj": "block_sparse_moe.experts.{e}.w1",
    "expert_up_proj": "block_sparse_moe.experts.{e}.w3",
    "expert_down_proj": "block_sparse_moe.experts.{e}.w2",
}


def _config(hf) -> dict:
    return moe_config(hf, hf.num_local_experts, True, hf.intermediate_size)


FAMILY = DecoderFamily(
    name="mixtral",
    hf_architectures=("MixtralForCausalLM",),
    trtllm_architecture="MixtralForCausalLM",
    layout=with_experts(LLAMA),
    hf=Names(llama.HF_NAMES.model, llama.HF_NAMES.layer_prefix, llama.HF_NAMES.layer | EXPERTS_HF),
    # llama.cpp writes Mixtral as `llama` with an expert count (registry.family_for_gguf) and merged
    # ffn_*_exps tensors (w1 is ffn_gate, w3 ffn_up, w2 ffn_down); files with one tensor per expert are refused
    gguf=GGUFNames(
        "llama",
        Names(llama.GGUF_NAMES.model, llama.GGUF_NAMES.layer_prefix, llama.GGUF_NAMES.layer | qwen3_moe.EXPERTS_GGUF),
        permuted_qk=True,
        config_keys={"num_local_experts": "expert_count", "num_experts_per_tok": "expert_used_count"},
        model_type="mixtral",
    ),
    features=llama.FEATURES | {MOE},
    config_features=frozenset({SLIDING_WINDOW, TIED_EMBEDDINGS, ROPE_SCALING}),
    config_extras=_config,
    backends=frozenset({"torch", "trtllm"}),  # trtllm: on the releases backends/tensorrt_llm/model_support.py names
    quant_formats=WEIGHT_ONLY,
)
