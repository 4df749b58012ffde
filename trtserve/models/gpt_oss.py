"""gpt-oss family: Llama's attention with q/k/v and o biases and a learned sink logit per head in each
softmax's denominator, sliding-window and full layers by `layer_types`, YaRN RoPE, and experts in every
layer's place of the MLP: a biased router whose top `num_experts_per_tok` logits are softmaxed, experts
with biases and the clamped SwiGLU (`swiglu_alpha`, `swiglu_limit`). HF stores each layer's experts as
stacked tensors, gate and up interleaved in `gate_up_proj` (in, out); released checkpoints keep them as
MXFP4 `*_blocks` / `*_scales`, dequantized exactly at build time (build/stored.py). llama.cpp's `gpt-oss`
GGUF files are read too: gate and up split into their own merged tensors, MXFP4 experts (ggml's blocks,
build/gguf_blocks.py) dequantized as the safetensors ones."""

from trtserve.engine.errors import UserError
from trtserve.models import llama, qwen3_moe
from trtserve.models.family import DecoderFamily, GGUFNames, Stored, layer_windows
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
# llama.cpp's (its gpt-oss graph): the MLP's norm as post_attention_norm, each head's sink, and gate, up and
# down each merged over the experts (ffn_*_exps, (E, out, in)) with their biases (E, out)
GGUF_NAMES = Names(
    llama.GGUF_NAMES.model,
    llama.GGUF_NAMES.layer_prefix,
    llama.GGUF_NAMES.layer | {"post_norm": "post_attention_norm", "sinks": "attn_sinks"} | qwen3_moe.EXPERTS_GGUF,
)
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
    gguf=GGUFNames(
        "gpt-oss",
        GGUF_NAMES,
        permuted_qk=False,  # llama.cpp's gpt-oss graph rotates NeoX halves: its converter leaves q/k as HF's
        config_keys={
            "num_local_experts": "expert_count",
            "num_experts_per_tok": "expert_used_count",
            "sliding_window": "attention.sliding_window",
        },
        model_type="gpt_oss",
        # llama.cpp's graph fixes the clamped SwiGLU (llm_graph_context's LLM_FFN_SWIGLU_OAI_MOE) and
        # alternates sliding and full layers from the first, as HF's default layer_types do
        config_values={"swiglu_alpha": 1.702, "swiglu_limit": 7.0},
        # released checkpoints do not truncate YaRN's correction range (OpenAI's reference); llama.cpp rounds it
        rope_values={"truncate": False},
    ),
    features=llama.FEATURES | {QKV_BIAS, ATTN_OUT_BIAS, ATTN_SINKS, MOE, CLAMPED_SWIGLU_EXPERTS},
    config_features=frozenset({SLIDING_WINDOW, LAYER_WINDOWS, ROPE_SCALING, TIED_EMBEDDINGS}),
    config_extras=_config,
    backends=frozenset({"torch", "trtllm"}),  # trtllm: on the releases backends/tensorrt_llm/model_support.py names
    quant_formats=WEIGHT_ONLY,
    hf_stored=HF_STORED,
)
