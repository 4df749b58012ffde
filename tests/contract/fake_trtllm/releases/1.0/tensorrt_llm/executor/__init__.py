"""tensorrt_llm/executor (1.0): only what trtserve's adapter imports."""
