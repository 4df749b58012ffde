"""gpt-oss family: Llama's attention with q/k/v and o biases and a learned sink logit per head in each
softmax's denominator, sliding-window and full layers by `layer_types`, YaRN RoPE, and experts in every
layer's place of the MLP: a biased router whose top `num_experts_per_tok` logits are softmaxed, experts
with biases and the clamped SwiGLU (`swiglu_alpha`, `swiglu_limit`). HF stores each layer's experts as
stacked tensors, gate and up interleaved in `gate_up_proj` (in, out); released checkpoints keep them as
MXFP4 `*_blocks` / `*_scales`, dequantized exactly at build time (build/stored.py). llama.cpp's gpt-oss
GGUF files are not read."""

from trtserve.engine.errors import UserError
from trtserve.models import llama
from trtserve.models.family import DecoderFamily, Stored, layer_windows
from trtserve.models.features import (
    ATTN_OUT_BIAS,
    ATTN_SINKS,
    CLAMPED_SWIGLU_EXPERTS,
    LAYER_WINDOWS,
    MOE,
    QKV_BIAS,
    ROPE_SCALING,
    SLIDING_WINDOW,
    TIED_EMBEDDINGS,
)
from trtserve.models.layout import LLAMA, Layout, Names, Source, Target
from trtserve.models.moe import WEIGHT_ONLY, moe_config, with_experts

# Llama's table with an o_proj bias and each head's sink logit
SINKS_LAYOUT = Layout(
    model=LLAMA.model,
    layer=LLAMA.layer
    | {"o_proj": Source(("hidden_size", "q_size"), ATTN_OUT_BIAS), "sinks": Source(("num_attention_heads",))},
    trtllm_model=LLAMA.trtllm_model,
    trtllm_prefix=LLAMA.trtllm_prefix,
    trtllm_layer=LLAMA.trtllm_layer | {"sinks": Target("attention.sinks", ("sinks",))},
    engine_layer=LLAMA.engine_layer,
)
EXPERTS_HF = {
    "sinks": "self_attn.sinks",
    "router": "mlp.router",
    "expert_gate_proj": "mlp.experts.gate_proj",
    "expert_up_proj": "mlp.experts.up_proj",
    "expert_down_proj": "mlp.experts.down_proj",
}
# HF's GptOssExperts: gate_up_proj (E, hidden, 2 I) with gate and up interleaved, down_proj (E, I, hidden)
HF_STORED = {
    "mlp.experts.gate_proj.weight": Stored("mlp.experts.gate_up_proj", 0, 2, transposed=True),
    "mlp.experts.up_proj.weight": Stored("mlp.experts.gate_up_proj", 1, 2, transposed=True),
    "mlp.experts.down_proj.weight": Stored("mlp.experts.down_proj", transposed=True),
    "mlp.experts.gate_proj.bias": Stored("mlp.experts.gate_up_proj_bias", 0, 2),
    "mlp.experts.up_proj.bias": Stored("mlp.experts.gate_up_proj_bias", 1, 2),
    "mlp.experts.down_proj.bias": Stored("mlp.experts.down_proj_bias"),
    "self_attn.sinks.weight": Stored("self_attn.sinks"),
}


def _config(hf) -> dict:
    if hf.num_local_experts < 1:
        raise UserError(
            f"num_local_experts is {hf.num_local_experts}; a gpt_oss model needs at least 1, fix config.json"
        )
    if not hf.attention_bias:
        raise UserError("gpt_oss with attention_bias false is not supported; its attention projections have biases")
    return moe_config(hf, hf.num_local_experts, True, hf.intermediate_size) | {
        "layer_windows": layer_windows(hf),
        "swiglu_alpha": float(hf.swiglu_alpha),
        "swiglu_limit": float(hf.swiglu_limit),
    }


FAMILY = DecoderFamily(
    name="gpt_oss",
    hf_architectures=("GptOssForCausalLM",),
    trtllm_architecture="GptOssForCausalLM",
    layout=with_experts(SINKS_LAYOUT, bias=CLAMPED_SWIGLU_EXPERTS),
    hf=Names(llama.HF_NAMES.model, llama.HF_NAMES.layer_prefix, llama.HF_NAMES.layer | EXPERTS_HF),
    gguf=None,
    features=llama.FEATURES | {QKV_BIAS, ATTN_OUT_BIAS, ATTN_SINKS, MOE, CLAMPED_SWIGLU_EXPERTS},
    config_features=frozenset({SLIDING_WINDOW, LAYER_WINDOWS, ROPE_SCALING, TIED_EMBEDDINGS}),
    config_extras=_config,
    backends=frozenset({"torch", "trtllm"}),  # trtllm: on the releases backends/tensorrt_llm/model_support.py names
    quant_formats=WEIGHT_ONLY,
    hf_stored=HF_STORED,
)
