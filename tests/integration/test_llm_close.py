"""trtserve.LLM's close(): the second KV tier's prefixes outlive an offline LLM, closed by `with`, by
close() or by the interpreter's exit, as they outlive a server's clean stop (tests/integration/test_kv_tier.py
checks the engine core's own restart the same way: same tokens, the usable prefix served from the tier)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trtserve.engine.sampling import SamplingParams
from trtserve.llm import LLM

P = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
PROMPT = list(range(3, 67))  # 64 tokens: 4 blocks of 16
USABLE = 48  # (64 - 1) // 16 full blocks can be hits: the last token's logits are needed


def offload(tmp_path) -> dict:
    return {"bytes": 1 << 20, "path": str(tmp_path / "tier")}


def test_a_closed_llm_leaves_its_prefixes_to_the_next(tiny_llama_engine, tmp_path):
    with LLM(tiny_llama_engine, kv_offload=offload(tmp_path)) as first:
        out = first.generate(PROMPT, P)[0]
        assert out.num_cached_tokens == 0
    assert first.closed
    with pytest.raises(RuntimeError, match="closed"):
        first.generate(PROMPT, P)
    first.close()  # again: nothing happens
    second = LLM(tiny_llama_engine, kv_offload=offload(tmp_path))
    again = second.generate(PROMPT, P)[0]
    second.close()
    assert (again.token_ids, again.num_cached_tokens) == (out.token_ids, USABLE)


def test_the_interpreter_s_exit_closes_an_llm_left_open(tiny_llama_engine, tmp_path):
    code = (
        "from trtserve.engine.sampling import SamplingParams\nfrom trtserve.llm import LLM\n"
        f"llm = LLM({str(tiny_llama_engine)!r}, kv_offload={offload(tmp_path)!r})\n"
        f"print(llm.generate({PROMPT!r}, SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True))[0].token_ids)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    with LLM(tiny_llama_engine, kv_offload=offload(tmp_path)) as llm:
        again = llm.generate(PROMPT, P)[0]
    assert (str(again.token_ids), again.num_cached_tokens) == (r.stdout.strip(), USABLE)
