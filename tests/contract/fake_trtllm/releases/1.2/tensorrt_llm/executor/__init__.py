"""tensorrt_llm/executor (1.2): only what trtserve's adapter imports."""
