"""Qwen2 family: Llama's layout and names with biases on q, k and v (no per-layer sliding windows)."""

from trtserve.models import llama
from trtserve.models.family import DecoderFamily, GGUFNames
from trtserve.models.features import QKV_BIAS
from trtserve.models.layout import LLAMA

FAMILY = DecoderFamily(
    name="qwen2",
    hf_architectures=("Qwen2ForCausalLM",),
    trtllm_architecture="Qwen2ForCausalLM",
    layout=LLAMA,
    hf=llama.HF_NAMES,
    gguf=GGUFNames("qwen2", llama.GGUF_NAMES, permuted_qk=False),
    features=llama.FEATURES | {QKV_BIAS},
    config_features=llama.CONFIG_FEATURES,
)
