"""Mistral family: Llama's layout plus sliding-window attention."""

from trtserve.models.family import DecoderFamily

FAMILY = DecoderFamily(
    name="mistral",
    hf_architectures=("MistralForCausalLM",),
    # TensorRT-LLM converts Mistral through its Llama model class.
    trtllm_architecture="LlamaForCausalLM",
    qkv_bias=False,
    gguf_arch=None,  # llama.cpp writes Mistral GGUFs as "llama"
    gguf_permuted_qk=True,
    uses_sliding_window=True,
)
