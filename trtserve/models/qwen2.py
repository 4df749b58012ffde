"""Qwen2 family: Llama's layout with biases on q, k and v (no per-layer sliding windows)."""

from trtserve.models.family import DecoderFamily

FAMILY = DecoderFamily(
    name="qwen2",
    hf_architectures=("Qwen2ForCausalLM",),
    trtllm_architecture="Qwen2ForCausalLM",
    qkv_bias=True,
    gguf_arch="qwen2",
    gguf_permuted_qk=False,
)
