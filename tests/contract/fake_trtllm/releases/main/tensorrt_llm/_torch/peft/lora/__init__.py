"""Package marker (fake TensorRT-LLM main)."""
