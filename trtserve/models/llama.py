"""Llama family: GQA, tied embeddings, head_dim override, rope scaling (incl. llama3)."""

from trtserve.models.family import DecoderFamily

FAMILY = DecoderFamily(
    name="llama",
    hf_architectures=("LlamaForCausalLM",),
    trtllm_architecture="LlamaForCausalLM",
    qkv_bias=False,
    gguf_arch="llama",
    gguf_permuted_qk=True,
)
