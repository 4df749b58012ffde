"""Real TensorRT-LLM: build, load, greedy tokens equal HF transformers, serve over HTTP.

Run on a GPU host with TensorRT-LLM installed: `pytest tests/gpu -m gpu`. Skipped elsewhere.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from helpers import hf_greedy, random_prompts

from trtserve.engine.messages import GenerateRequest
from trtserve.engine.sampling import SamplingParams

MAX_NEW = 12


def _build(src, out, backend):
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    cfg = BuildConfig(model=str(src), backend=backend, dtype="float16", max_batch_size=8, max_num_tokens=1024)
    return build_engine(cfg, out, force=True, quiet=True).engine_dir


def _greedy(engine, prompts):
    async def one(i, p):
        toks = []
        params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
        async for d in engine.generate(GenerateRequest(p, params)):
            toks += d.token_ids
        return toks

    async def run():
        return await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))

    return asyncio.run(run())


def _tensorrt_workflow_problem() -> str | None:
    """Why the installed TensorRT-LLM cannot build TensorRT engines (it has no trtllm-build), if so."""
    import tensorrt_llm

    from trtserve.backends.tensorrt_llm.capabilities import probe
    from trtserve.backends.tensorrt_llm.compat import workflow_problem

    return workflow_problem(probe(tensorrt_llm), "tensorrt", build=True)


@pytest.mark.parametrize("backend", ["trtllm", "tensorrt"])
def test_greedy_equals_hf(backend, gpu_llama, tmp_path):
    problem = _tensorrt_workflow_problem() if backend == "tensorrt" else None
    if problem:
        pytest.skip(problem)
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine
    from trtserve.engine.manifest import read_manifest

    out = _build(gpu_llama, tmp_path / backend, backend)
    manifest = read_manifest(out)
    if backend == "tensorrt":
        assert (out / "engine" / "config.json").is_file() and (out / "engine" / "rank0.engine").is_file()
        assert manifest.target["sm"] == "{}.{}".format(*torch.cuda.get_device_capability(0))
    prompts = random_prompts(4, seed=1, vocab=320)
    engine = TrtllmEngine(out)
    try:
        got = _greedy(engine, prompts)
        stats = engine.stats()
    finally:
        engine.shutdown()
    expected = hf_greedy(gpu_llama, prompts, MAX_NEW, dtype=torch.float16, device="cuda")
    assert got == expected
    assert stats.scheduler.generated_tokens == 4 * MAX_NEW


def test_serve_trtllm_with_openai_client(gpu_llama, tmp_path):
    import openai
    from api.conftest import Server

    out = _build(gpu_llama, tmp_path / "served", "trtllm")
    server = Server(out, log=tmp_path / "server.log")
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
        r = client.completions.create(
            model=out.name, prompt=[5, 6, 7], max_tokens=8, temperature=0, extra_body={"ignore_eos": True}
        )
        assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 8
        assert server.metric("trtserve_generation_tokens_total") >= 8
    finally:
        server.stop()
