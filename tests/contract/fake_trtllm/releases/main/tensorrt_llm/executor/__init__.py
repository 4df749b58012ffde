"""tensorrt_llm/executor (main): only what trtserve's adapter imports."""
