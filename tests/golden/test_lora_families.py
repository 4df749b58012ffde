"""LoRA on every dense family of issue 46, on each family's own attention and MLP modules (Phi-3's fused
qkv_proj and gate_up_proj included): greedy tokens equal HF transformers + PEFT (float32) and logprobs
within 1e-4 of PEFT's log-softmax; a module the family does not have is refused in one sentence."""

from __future__ import annotations

import pytest
import torch
from dense_families import DENSE
from family_goldens import build, make_model
from helpers import greedy_of, make_lora_adapter, random_prompts

from trtserve import LLM, SamplingParams
from trtserve.engine.errors import UserError
from trtserve.models.lora import module_names
from trtserve.models.registry import _FAMILIES

pytest.importorskip("peft")

NEW_TOKENS = 16


def _peft(src, adapter):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32), adapter).eval()


@pytest.mark.parametrize("name", sorted(DENSE))
def test_an_adapter_on_every_attention_and_mlp_module_equals_peft(tmp_path, name):
    model_type, overrides = DENSE[name]
    src = make_model(tmp_path / "hf", model_type, seed=2, **overrides)
    targets = tuple(dict.fromkeys(module_names(_FAMILIES[name]).values()))
    adapter = make_lora_adapter(src, tmp_path / "lora", targets, 4, 8.0, seed=1)
    llm = LLM(build(src, tmp_path / "e"), lora={"adapters": {"a": str(adapter)}}, kv_cache_memory=8 << 20)
    peft = _peft(src, adapter)
    prompts = random_prompts(3, seed=4, lo=10, hi=30)
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True, logprobs=1)
    base = [o.token_ids for o in llm.generate(prompts, params)]
    outs = llm.generate(prompts, params, adapter="a")
    assert [o.token_ids for o in outs] != base, "an adapter that changes nothing tests nothing"
    expected = greedy_of(peft, prompts, NEW_TOKENS)
    assert [o.token_ids for o in outs] == expected, name
    with torch.inference_mode():
        for p, out, want in zip(prompts, outs, expected, strict=True):
            logp = torch.log_softmax(peft(torch.tensor([p + want])).logits[0, len(p) - 1 : -1], dim=-1)
            got = [lp.logprob for lp in out.outputs[0].logprobs]
            assert got == pytest.approx(logp[torch.arange(NEW_TOKENS), want].tolist(), abs=1e-4), name


def test_phi3_takes_its_fused_modules_and_refuses_the_split_ones(tmp_path):
    model_type, overrides = DENSE["phi3"]
    src = make_model(tmp_path / "hf", model_type, seed=2, **overrides)
    assert set(module_names(_FAMILIES["phi3"]).values()) == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
    llama = make_model(tmp_path / "llama", "llama", seed=2)
    split = make_lora_adapter(llama, tmp_path / "split", ("q_proj", "v_proj"), 4, 8.0)
    with pytest.raises(UserError) as err:
        LLM(build(src, tmp_path / "e"), lora={"adapters": {"a": str(split)}}, kv_cache_memory=8 << 20)
    assert "targets q_proj, v_proj; trtserve applies adapters to down_proj, gate_up_proj, o_proj, qkv_proj" in str(
        err.value
    ) and "\n" not in str(err.value)
