"""OLMoE family: Llama's attention with an RMSNorm over all of q's heads and one over all of k's (q_size
and kv_size weights, not per head as Qwen3's) before RoPE, and experts in every layer's place of the MLP:
a softmax router over `num_experts`, each token's top `num_experts_per_tok` (8 of 64), renormalized only
where `norm_topk_prob` (off in the released checkpoints). `clip_qkv` is refused."""

from dataclasses import replace

from trtserve.engine.errors import UserError
from trtserve.models import llama, qwen3, qwen3_moe
from trtserve.models.family import DecoderFamily, GGUFNames
from trtserve.models.features import MOE, QK_NORM_WIDE, TIED_EMBEDDINGS
from trtserve.models.layout import LLAMA, QK_NORMED, Names, Source
from trtserve.models.moe import WEIGHT_ONLY, moe_config, with_experts

WIDE_QK_NORMED = replace(QK_NORMED, layer=LLAMA.layer | {"q_norm": Source(("q_size",)), "k_norm": Source(("kv_size",))})


def _config(hf) -> dict:
    if hf.num_experts < 1:
        raise UserError(f"num_experts is {hf.num_experts}; an olmoe model needs at least 1 expert, fix config.json")
    if getattr(hf, "clip_qkv", None) is not None:
        raise UserError(f"clip_qkv {hf.clip_qkv} (q, k and v clamped) is not supported for olmoe models yet")
    return moe_config(hf, hf.num_experts, hf.norm_topk_prob, hf.intermediate_size)


FAMILY = DecoderFamily(
    name="olmoe",
    hf_architectures=("OlmoeForCausalLM",),
    trtllm_architecture="OlmoeForCausalLM",
    layout=with_experts(WIDE_QK_NORMED),
    hf=Names(qwen3.HF_NAMES.model, qwen3.HF_NAMES.layer_prefix, qwen3.HF_NAMES.layer | qwen3_moe.EXPERTS_HF),
    gguf=GGUFNames(
        "olmoe",
        Names(qwen3.GGUF_NAMES.model, qwen3.GGUF_NAMES.layer_prefix, qwen3.GGUF_NAMES.layer | qwen3_moe.EXPERTS_GGUF),
        permuted_qk=False,  # llama.cpp's olmoe graph rotates NeoX halves: its converter leaves q/k as HF's
        config_keys={"num_experts": "expert_count", "num_experts_per_tok": "expert_used_count"},
        config_values={"norm_topk_prob": False},  # llama.cpp's olmoe graph does not renormalize the top k
    ),
    features=llama.FEATURES | {QK_NORM_WIDE, MOE},
    config_features=frozenset({TIED_EMBEDDINGS}),
    config_extras=_config,
    backends=frozenset({"torch"}),
    quant_formats=WEIGHT_ONLY,
)
