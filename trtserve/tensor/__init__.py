"""Tensor models: fixed-shape models served beside the LLMs (ONNX Runtime sessions, Python steps and
ensembles) with Triton's model configuration and dynamic batching. No KV cache, no tokenizer of
their own; serve/ reaches them only through `trtserve.tensor.types` (TensorModel, InferRequest)."""
