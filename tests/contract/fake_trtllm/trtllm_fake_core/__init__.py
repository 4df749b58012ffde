"""Machinery shared by the per-release TensorRT-LLM fakes in ../releases/<release>/tensorrt_llm.

Not TensorRT-LLM's API: each release's package composes these pieces the way that release behaves,
and names the upstream file it imitates beside each choice. On sys.path beside a release's root.
"""
