"""Granite 3 family: Llama's layout and names, with the embeddings, the attention scale, each block's
residual update and the logits scaled by the config's multipliers."""

from trtserve.models import llama
from trtserve.models.family import DecoderFamily, GGUFNames
from trtserve.models.features import MLP_BIAS, RESIDUAL_SCALE, ROPE_SCALING, TIED_EMBEDDINGS
from trtserve.models.layout import LLAMA

# ModelConfig field (HF's config key too) -> the metadata key llama.cpp writes it to
MULTIPLIERS = {
    "embedding_multiplier": "embedding_scale",
    "attention_multiplier": "attention.scale",
    "residual_multiplier": "residual_scale",
    "logits_scaling": "logit_scale",
}


def _config(hf) -> dict:
    return {key: float(getattr(hf, key)) for key in MULTIPLIERS}


FAMILY = DecoderFamily(
    name="granite",
    hf_architectures=("GraniteForCausalLM",),
    trtllm_architecture="GraniteForCausalLM",
    layout=LLAMA,
    hf=llama.HF_NAMES,
    gguf=GGUFNames("granite", llama.GGUF_NAMES, True, MULTIPLIERS),  # converted as Llama: q/k rows permuted
    features=llama.FEATURES | {RESIDUAL_SCALE},
    config_features=frozenset({MLP_BIAS, TIED_EMBEDDINGS, ROPE_SCALING}),
    config_extras=_config,
    backends=frozenset({"torch", "trtllm"}),  # trtllm: on the releases backends/tensorrt_llm/model_support.py names
    quant_formats=None,  # every format: tests/golden/test_quant_families.py, test_gguf_families.py
)
