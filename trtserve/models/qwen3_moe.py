"""Qwen3-MoE family: Qwen3's attention (per-head q/k RMSNorm) with experts in place of the MLP: a
softmax router over `num_experts`, each token's top `num_experts_per_tok`, renormalized where
`norm_topk_prob`; layers in `mlp_only_layers`, or off every `decoder_sparse_step`-th, keep a dense MLP."""

from trtserve.engine.errors import UserError
from trtserve.models import qwen3
from trtserve.models.family import DecoderFamily, GGUFNames
from trtserve.models.features import MOE
from trtserve.models.layout import QK_NORMED, Names
from trtserve.models.moe import WEIGHT_ONLY, moe_config, with_experts

EXPERTS_HF = {
    "router": "mlp.gate",
    "expert_gate_proj": "mlp.experts.{e}.gate_proj",
    "expert_up_proj": "mlp.experts.{e}.up_proj",
    "expert_down_proj": "mlp.experts.{e}.down_proj",
}
# llama.cpp's: the router, and each role's experts merged into one (num_experts, out, in) tensor
EXPERTS_GGUF = {
    "router": "ffn_gate_inp",
    "expert_gate_proj": "ffn_gate_exps",
    "expert_up_proj": "ffn_up_exps",
    "expert_down_proj": "ffn_down_exps",
}


def _config(hf) -> dict:
    if hf.num_experts < 1:
        raise UserError(f"num_experts is {hf.num_experts}; a qwen3_moe model needs at least 1 expert, fix config.json")
    dense, step = set(hf.mlp_only_layers or ()), hf.decoder_sparse_step
    layers = [i for i in range(hf.num_hidden_layers) if i not in dense and (i + 1) % step == 0]
    return moe_config(hf, hf.num_experts, hf.norm_topk_prob, hf.moe_intermediate_size, layers)


FAMILY = DecoderFamily(
    name="qwen3_moe",
    hf_architectures=("Qwen3MoeForCausalLM",),
    trtllm_architecture="Qwen3MoeForCausalLM",
    layout=with_experts(QK_NORMED),
    hf=Names(qwen3.HF_NAMES.model, qwen3.HF_NAMES.layer_prefix, qwen3.HF_NAMES.layer | EXPERTS_HF),
    gguf=GGUFNames(
        "qwen3moe",
        Names(qwen3.GGUF_NAMES.model, qwen3.GGUF_NAMES.layer_prefix, qwen3.GGUF_NAMES.layer | EXPERTS_GGUF),
        permuted_qk=False,
        config_keys={
            "num_experts": "expert_count",
            "num_experts_per_tok": "expert_used_count",
            "moe_intermediate_size": "expert_feed_forward_length",
        },
        model_type="qwen3_moe",
        config_values={"norm_topk_prob": True},  # llama.cpp's qwen3moe graph renormalizes the top k
    ),
    features=qwen3.FAMILY.features | {MOE},
    config_features=qwen3.FAMILY.config_features,
    config_extras=_config,
    backends=frozenset({"torch", "trtllm"}),  # trtllm: on the releases backends/tensorrt_llm/model_support.py names
    quant_formats=WEIGHT_ONLY,
)
