"""Gemma 3 text family (`Gemma3ForCausalLM`, model_type gemma3_text): Gemma 2's layers without its soft-caps
(where the config sets none), q and k RMS-normed per head before RoPE, the local layers rotated by their own
RoPE base (`rope_local_base_freq`), by default five local layers to each global one."""

from trtserve.models.family import DecoderFamily, GGUFNames
from trtserve.models.features import LOCAL_ROPE, QK_NORM
from trtserve.models.gemma2 import (
    CONFIG_FEATURES,
    FEATURES,
    GEMMA2_GGUF,
    GEMMA2_HF,
    GEMMA2_LAYOUT,
    GGUF_KEYS,
    NORMS,
    gemma_config,
)
from trtserve.models.layout import Layout, Names, Source, Target

QK_NORMS = ("q_norm", "k_norm")

GEMMA3_LAYOUT = Layout(
    model=GEMMA2_LAYOUT.model,
    layer=GEMMA2_LAYOUT.layer | {r: Source(("head_size",)) for r in QK_NORMS},
    trtllm_model=GEMMA2_LAYOUT.trtllm_model,
    trtllm_prefix=GEMMA2_LAYOUT.trtllm_prefix,
    trtllm_layer=GEMMA2_LAYOUT.trtllm_layer
    | {"q_norm": Target("attention.q_layernorm", ("q_norm",)), "k_norm": Target("attention.k_layernorm", ("k_norm",))},
    engine_layer=GEMMA2_LAYOUT.engine_layer,
)

GEMMA3_HF = Names(GEMMA2_HF.model, GEMMA2_HF.layer_prefix, GEMMA2_HF.layer | {r: f"self_attn.{r}" for r in QK_NORMS})
GEMMA3_GGUF = Names(GEMMA2_GGUF.model, GEMMA2_GGUF.layer_prefix, GEMMA2_GGUF.layer | {r: f"attn_{r}" for r in QK_NORMS})


FAMILY = DecoderFamily(
    name="gemma3",
    hf_architectures=("Gemma3ForCausalLM",),
    trtllm_architecture="Gemma3ForCausalLM",
    layout=GEMMA3_LAYOUT,
    hf=GEMMA3_HF,
    gguf=GGUFNames(
        "gemma3",
        GEMMA3_GGUF,
        permuted_qk=False,
        config_keys=GGUF_KEYS,
        model_type="gemma3_text",
        config_values={"sliding_window_pattern": 6},  # llama.cpp's graph: every sixth layer is global
        weight_offsets=dict.fromkeys((*NORMS, *QK_NORMS, "final_norm"), 1.0),
        local_rope_base=10000.0,  # llama.cpp's graph fixes the local layers' base
    ),
    features=FEATURES | {QK_NORM},
    config_features=CONFIG_FEATURES | {LOCAL_ROPE},
    config_extras=gemma_config,
    backends=frozenset({"torch", "trtllm"}),  # trtllm: on the releases backends/tensorrt_llm/model_support.py names
    quant_formats=None,  # every format: tests/golden/test_quant_families.py, test_gguf_families.py
)
