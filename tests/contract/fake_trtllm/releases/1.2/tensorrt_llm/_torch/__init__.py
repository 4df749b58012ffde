"""Package marker (fake TensorRT-LLM 1.2)."""
