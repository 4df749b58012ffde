"""The compute floor's FLOP count, checked against torch's own count of the same model's forward."""

from __future__ import annotations

import pytest
import torch

from trtserve.bench.floor import Floor, attention_flops, linear_flops_per_token, request_flops, workload_flops
from trtserve.engine.model_config import ModelConfig


def _cfg(**kw) -> ModelConfig:
    base = dict(
        architecture="LlamaForCausalLM", dtype="float32", vocab_size=320, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_size=16, intermediate_size=96,
        max_position_embeddings=256, norm_epsilon=1e-5, rotary_base=10000.0,
    )  # fmt: skip
    return ModelConfig(**(base | kw))


def test_linear_flops_equal_torchs_count_of_the_hf_models_projections():
    """torch's FlopCounterMode over a transformers Llama of the same shape counts the same linears."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = _cfg()
    hf = LlamaForCausalLM(
        LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager")
    ).eval()  # fmt: skip
    tokens = 10
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        hf(torch.arange(tokens)[None], logits_to_keep=1)
    # torch counts every mm/bmm: the projections, QK^T and PV over the full (causal-masked) square,
    # and one lm_head row. Ours counts only the causal half of attention, so add the masked half back.
    masked_half = 4.0 * cfg.q_size * (tokens * tokens - tokens * (tokens + 1) // 2) * cfg.num_hidden_layers
    ours = request_flops(cfg, tokens, 1) + masked_half
    assert ours == counter.get_total_flops()


def test_attention_counts_each_position_over_its_context_and_the_window_caps_it():
    cfg = _cfg()
    one = 4.0 * cfg.q_size * cfg.num_hidden_layers
    assert attention_flops(cfg, 0, 3) == one * (1 + 2 + 3)
    assert attention_flops(cfg, 2, 4) == one * (3 + 4)
    assert attention_flops(_cfg(sliding_window=2), 0, 4) == one * (1 + 2 + 2 + 2)


def test_a_request_is_its_prompt_plus_output_minus_one_positions_and_one_logits_row_per_token():
    cfg = _cfg()
    head = 2.0 * cfg.hidden_size * cfg.vocab_size
    got = request_flops(cfg, 5, 3)
    assert got == 7 * linear_flops_per_token(cfg) + attention_flops(cfg, 0, 7) + 3 * head
    assert workload_flops(cfg, [(5, 3), (5, 3)]) == 2 * got


@pytest.mark.parametrize("achieved", [10.0, 40.0])
def test_the_floor_is_the_tokens_served_at_the_gemm_rate(achieved):
    f = Floor(flops=2e12, gemm_flop_s=100e9, output_tokens=1000, achieved_tok_s=achieved)
    assert f.floor_tok_s == pytest.approx(50.0)  # 1000 tokens in 20 s
    assert f.fraction == pytest.approx(achieved / 50.0)
    assert "of the floor" in f.line()
