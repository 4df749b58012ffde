"""tensorrt_llm/executor (1.1): only what trtserve's adapter imports."""
