"""`trtserve eval` on the tiny Llama: perplexity equals HF transformers' loss; KL and agreement see real differences."""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner

from trtserve.cli import main
from trtserve.runtime.eval_data import default_text
from trtserve.runtime.evaluate import evaluate

MAX_TOKENS = 300  # the built-in text is ~5000 tokens with the tiny tokenizer; a prefix keeps this fast


@pytest.fixture(scope="module")
def bf16_engine(tmp_path_factory, tiny_llama):
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    out = tmp_path_factory.mktemp("engines") / "tiny-llama-bf16"
    build_engine(BuildConfig(model=str(tiny_llama), tokens_per_block=16, dtype="bfloat16"), out, quiet=True)
    return out


def hf_perplexity(model_dir, text: str, max_tokens: int, seq_len: int, stride: int) -> tuple[float, int]:
    """Hugging Face's strided perplexity recipe, from the model's own loss (labels -100 = not scored)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = AutoTokenizer.from_pretrained(model_dir)(text, return_tensors="pt").input_ids[:, :max_tokens]
    n = ids.shape[1]
    nll_sum, count, prev_end = 0.0, 0, 0
    with torch.inference_mode():
        for begin in range(0, n, stride):
            end = min(begin + seq_len, n)
            labels = ids[:, begin:end].clone()
            labels[:, : prev_end - begin] = -100  # scored by an earlier window
            scored = int((labels[:, 1:] != -100).sum())  # the loss shifts labels by one
            if scored:
                loss = model(ids[:, begin:end], labels=labels).loss  # mean over scored tokens
                nll_sum += float(loss) * scored
                count += scored
            prev_end = end
            if end == n:
                break
    return math.exp(nll_sum / count), count


@pytest.mark.parametrize("seq_len,stride", [(64, 24), (48, 48), (256, 128)])
def test_perplexity_equals_hf_loss(tiny_llama, tiny_llama_engine, seq_len, stride):
    expected, count = hf_perplexity(tiny_llama, default_text(), MAX_TOKENS, seq_len, stride)
    got = evaluate(tiny_llama_engine, max_tokens=MAX_TOKENS, seq_len=seq_len, stride=stride)
    assert got.tokens == MAX_TOKENS and got.scored_tokens == count
    assert got.perplexity == pytest.approx(expected, rel=1e-5)
    assert got.reference is None and got.mean_kl is None


def test_engine_against_itself(tiny_llama_engine):
    r = evaluate(tiny_llama_engine, tiny_llama_engine, max_tokens=MAX_TOKENS, seq_len=64, stride=32)
    assert r.top1_agreement == 1.0
    assert r.mean_kl == pytest.approx(0.0, abs=1e-9) and r.max_kl == pytest.approx(0.0, abs=1e-9)
    assert r.perplexity_delta_pct == pytest.approx(0.0, abs=1e-9)
    assert r.reference_perplexity == pytest.approx(r.perplexity, rel=1e-12)


def test_bf16_against_f32_sees_the_rounding(tiny_llama_engine, bf16_engine):
    alone = evaluate(tiny_llama_engine, max_tokens=MAX_TOKENS, seq_len=64, stride=32)
    r = evaluate(bf16_engine, tiny_llama_engine, max_tokens=MAX_TOKENS, seq_len=64, stride=32)
    assert r.reference_perplexity == pytest.approx(alone.perplexity, rel=1e-12)
    assert r.mean_kl > 1e-6 and r.max_kl >= r.mean_kl  # bf16 weights and activations move the distributions
    assert r.top1_agreement < 1.0 or r.mean_kl > 1e-5
    # ...but only a little: a broken comparison (misaligned rows, swapped KL) would be far off.
    assert r.top1_agreement > 0.8 and r.mean_kl < 0.05 and abs(r.perplexity_delta_pct) < 2.0
    expected_delta = 100 * (r.perplexity - r.reference_perplexity) / r.reference_perplexity
    assert r.perplexity_delta_pct == pytest.approx(expected_delta, rel=1e-9)


def test_cli_jsonl_scores_the_documents_joined(tmp_path, tiny_llama_engine):
    docs = ["The keeper opened the ledger.", "He wrote down the weather.", "def f(x):\n    return x + 1"]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps({"text": d, "id": i}) for i, d in enumerate(docs)) + "\n")
    (tmp_path / "d.txt").write_text("\n\n".join(docs))
    out = {}
    for name in ("d.jsonl", "d.txt"):
        res = CliRunner().invoke(main, ["eval", str(tiny_llama_engine), "--data", str(tmp_path / name), "--json"])
        assert res.exit_code == 0, res.output
        out[name] = json.loads(res.stdout)
    assert out["d.jsonl"]["perplexity"] == out["d.txt"]["perplexity"]
    assert out["d.txt"]["scored_tokens"] == out["d.txt"]["tokens"] - 1 > 10


def test_scorer_frees_its_blocks(tiny_llama_engine):
    from trtserve.runtime.loader import load_engine
    from trtserve.runtime.scorer import WindowScorer

    scorer = WindowScorer(load_engine(tiny_llama_engine, "cpu"), 40)  # 16-token blocks: 3
    whole = scorer.logits(list(range(3, 43)), range(40))  # (40, vocab)
    assert scorer.blocks.num_free_blocks == scorer.blocks.num_blocks == 3
    scorer.blocks.check_invariants()
    # The same rows again, asked for one by one, from a cache that held the previous window.
    rows = [scorer.logits(list(range(3, 43)), [r])[0] for r in (0, 17, 39)]
    torch.testing.assert_close(torch.stack(rows), whole[[0, 17, 39]], rtol=1e-5, atol=1e-5)  # GEMM shape rounding only
    with pytest.raises(ValueError, match="does not fit"):
        scorer.logits(list(range(3, 52)), [0])
    assert scorer.blocks.num_free_blocks == 3
