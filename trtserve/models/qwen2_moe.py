"""Qwen2-MoE family: Qwen2's attention (q/k/v bias) with experts as Qwen3-MoE routes them (top-k of a
softmax, renormalized where `norm_topk_prob`, dense layers in `mlp_only_layers`), plus a shared expert
every token runs, its output scaled by sigmoid(shared_expert_gate(x))."""

from trtserve.engine.errors import UserError
from trtserve.models import llama, qwen3_moe
from trtserve.models.family import DecoderFamily, GGUFNames
from trtserve.models.features import MOE, QKV_BIAS, ROPE_SCALING, TIED_EMBEDDINGS
from trtserve.models.layout import LLAMA, Names
from trtserve.models.moe import WEIGHT_ONLY, moe_config, with_experts

SHARED_HF = {
    "shared_gate_proj": "mlp.shared_expert.gate_proj",
    "shared_up_proj": "mlp.shared_expert.up_proj",
    "shared_down_proj": "mlp.shared_expert.down_proj",
    "shared_expert_gate": "mlp.shared_expert_gate",
}

# llama.cpp's shared expert: ffn_*_shexp, and its gate ffn_gate_inp_shexp, stored (1, hidden) as HF's
SHARED_GGUF = {
    "shared_gate_proj": "ffn_gate_shexp",
    "shared_up_proj": "ffn_up_shexp",
    "shared_down_proj": "ffn_down_shexp",
    "shared_expert_gate": "ffn_gate_inp_shexp",
}


def _config(hf) -> dict:
    if hf.num_experts < 1:
        raise UserError(f"num_experts is {hf.num_experts}; a qwen2_moe model needs at least 1 expert, fix config.json")
    dense, step = set(hf.mlp_only_layers or ()), hf.decoder_sparse_step
    layers = [i for i in range(hf.num_hidden_layers) if i not in dense and (i + 1) % step == 0]
    width, shared = hf.moe_intermediate_size, hf.shared_expert_intermediate_size
    return moe_config(hf, hf.num_experts, hf.norm_topk_prob, width, layers, shared_width=shared)


FAMILY = DecoderFamily(
    name="qwen2_moe",
    hf_architectures=("Qwen2MoeForCausalLM",),
    trtllm_architecture="Qwen2MoeForCausalLM",
    layout=with_experts(LLAMA, shared=True),
    hf=Names(
        llama.HF_NAMES.model, llama.HF_NAMES.layer_prefix, llama.HF_NAMES.layer | qwen3_moe.EXPERTS_HF | SHARED_HF
    ),
    gguf=GGUFNames(
        "qwen2moe",
        Names(
            llama.GGUF_NAMES.model,
            llama.GGUF_NAMES.layer_prefix,
            llama.GGUF_NAMES.layer | qwen3_moe.EXPERTS_GGUF | SHARED_GGUF,
        ),
        permuted_qk=False,
        config_keys={
            "num_experts": "expert_count",
            "num_experts_per_tok": "expert_used_count",
            "moe_intermediate_size": "expert_feed_forward_length",
            "shared_expert_intermediate_size": "expert_shared_feed_forward_length",
        },
        model_type="qwen2_moe",
        # llama.cpp's qwen2moe graph: experts in every layer, the top k not renormalized
        config_values={"norm_topk_prob": False, "mlp_only_layers": [], "decoder_sparse_step": 1},
    ),
    features=llama.FEATURES | {QKV_BIAS, MOE},
    config_features=frozenset({TIED_EMBEDDINGS, ROPE_SCALING}),
    config_extras=_config,
    backends=frozenset({"torch", "trtllm"}),  # trtllm: on the releases backends/tensorrt_llm/model_support.py names
    quant_formats=WEIGHT_ONLY,
)
