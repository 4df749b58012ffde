"""Mistral family: Llama's layout and names plus sliding-window attention."""

from trtserve.models import llama
from trtserve.models.family import DecoderFamily
from trtserve.models.features import SLIDING_WINDOW
from trtserve.models.layout import LLAMA

FAMILY = DecoderFamily(
    name="mistral",
    hf_architectures=("MistralForCausalLM",),
    # TensorRT-LLM converts Mistral through its Llama model class.
    trtllm_architecture="LlamaForCausalLM",
    layout=LLAMA,
    hf=llama.HF_NAMES,
    gguf=None,  # llama.cpp writes Mistral GGUFs as "llama"
    features=llama.FEATURES,
    config_features=llama.CONFIG_FEATURES | {SLIDING_WINDOW},
)
