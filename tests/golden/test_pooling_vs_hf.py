"""Pooling models on our engine against HF transformers (docs/pooling.md): embedders (last-token and mean
pooling, normalised) equal AutoModel + pooling, sequence classifiers equal AutoModelForSequenceClassification,
a generative reranker's score equals its logits' yes - no difference; each prompt alone, all batched, chunked
(16 tokens a step) and from the prefix cache. Float32 tolerance: 1e-4 absolute."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from helpers import POOLING_SHAPE, random_prompts, write_tokenizer

from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.engine.errors import UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.run_config import RuntimeConfig
from trtserve.engine.sampling import SamplingParams
from trtserve.runtime.engine_core import EngineCore
from trtserve.runtime.loader import load_engine

ATOL = 1e-4
COMMON = POOLING_SHAPE
QWEN3 = dict(head_dim=32, num_key_value_heads=1)
PREFILL = SamplingParams(max_tokens=1, temperature=0.0)


def _save(model, dest):
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    write_tokenizer(dest)
    return dest


def _hf(auto, model_type: str, seed: int, **overrides):
    from transformers import AutoConfig

    torch.manual_seed(seed)
    cfg = AutoConfig.for_model(model_type, **(COMMON | overrides))
    model = auto.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():  # norms away from ones, so a missed norm shows
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.3 * torch.randn_like(p))
    return model


def _build(src, out, **cfg):
    build_engine(BuildConfig(model=str(src), tokens_per_block=16, **cfg), out, quiet=True)
    return out


def _pool(engine_dir, prompts, task, **run) -> list[list[float]]:
    """The engine's pooled output of each prompt, all submitted at once."""
    core = EngineCore(load_engine(engine_dir), RuntimeConfig(kv_cache_memory=16 << 20, **run))
    reqs = [GenerateRequest(list(p), PREFILL, RequestOptions(pooling=task)) for p in prompts]
    for r in reqs:
        core.add_request(r)
    out = {}
    while core.has_unfinished():
        for d in core.step():
            assert d.error is None and not d.token_ids
            out[d.request_id] = d.pooled
    return [out[r.request_id] for r in reqs]


def _assert_all_ways(engine_dir, prompts, task, expected) -> None:
    """Alone, batched, chunked with the prefix cache warm (the last prompts again): each equals `expected`."""
    exp = torch.tensor(expected)
    alone = torch.tensor([_pool(engine_dir, [p], task)[0] for p in prompts])
    torch.testing.assert_close(alone, exp, atol=ATOL, rtol=0, msg="alone")
    batched = torch.tensor(_pool(engine_dir, prompts, task))
    torch.testing.assert_close(batched, exp, atol=ATOL, rtol=0, msg="batched")
    chunked = torch.tensor(_pool(engine_dir, prompts + prompts[-2:], task, max_num_tokens=16))
    torch.testing.assert_close(chunked, torch.cat([exp, exp[-2:]]), atol=ATOL, rtol=0, msg="chunked")


PROMPTS = random_prompts(5, seed=7, lo=1, hi=60)


@pytest.mark.parametrize("method", ["last", "mean"])
def test_qwen3_embedder_equals_automodel_pooled(tmp_path, method):
    from transformers import AutoModel

    hf = _hf(AutoModel, "qwen3", seed=1, **QWEN3)
    src = _save(hf, tmp_path / "hf")  # Qwen3Model: saved without the `model.` prefix, no LM head
    engine = _build(src, tmp_path / "e", pooling_method=method)
    manifest = json.loads((engine / "manifest.json").read_text())
    assert manifest["pooling"]["task"] == "embed" and manifest["pooling"]["method"] == method
    with torch.no_grad():
        states = [hf(torch.tensor([p])).last_hidden_state[0] for p in PROMPTS]
    pooled = [s[-1] if method == "last" else s.mean(0) for s in states]
    expected = [F.normalize(v, dim=0).tolist() for v in pooled]
    _assert_all_ways(engine, PROMPTS, "embed", expected)


def test_llama_embedder_from_a_causal_lm_with_pooling_embed(tmp_path):
    from transformers import AutoModel, AutoModelForCausalLM

    hf = _hf(AutoModelForCausalLM, "llama", seed=2)
    engine = _build(_save(hf, tmp_path / "hf"), tmp_path / "e", pooling="embed")
    base = AutoModel.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    with torch.no_grad():
        expected = [F.normalize(base(torch.tensor([p])).last_hidden_state[0, -1], dim=0).tolist() for p in PROMPTS]
    _assert_all_ways(engine, PROMPTS, "embed", expected)


@pytest.mark.parametrize(
    ("model_type", "overrides"), [("qwen3", QWEN3), ("llama", {}), ("qwen2", {"num_key_value_heads": 2})]
)
def test_sequence_classifier_equals_hf(tmp_path, model_type, overrides):
    from transformers import AutoModelForSequenceClassification

    labels = {0: "negative", 1: "neutral", 2: "positive"}
    hf = _hf(AutoModelForSequenceClassification, model_type, seed=3, num_labels=3, id2label=labels, **overrides)
    engine = _build(_save(hf, tmp_path / "hf"), tmp_path / "e")
    pooling = json.loads((engine / "manifest.json").read_text())["pooling"]
    assert (pooling["task"], pooling["labels"]) == ("classify", ["negative", "neutral", "positive"])
    with torch.no_grad():
        expected = [hf(torch.tensor([p])).logits[0].tolist() for p in PROMPTS]
    _assert_all_ways(engine, PROMPTS, "classify", expected)


def test_reranker_scores_equal_hf_yes_minus_no(tmp_path):
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    hf = _hf(AutoModelForCausalLM, "qwen3", seed=4, **QWEN3)
    src = _save(hf, tmp_path / "hf")
    engine = _build(src, tmp_path / "e", pooling="rerank", rerank_tokens=("y", "n"))
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    yes, no = tok.token_to_id("y"), tok.token_to_id("n")
    pooling = json.loads((engine / "manifest.json").read_text())["pooling"]
    assert (pooling["yes_token_id"], pooling["no_token_id"]) == (yes, no)
    with torch.no_grad():
        last = [hf(torch.tensor([p])).logits[0, -1] for p in PROMPTS]
    expected = [[float(x[yes] - x[no])] for x in last]
    _assert_all_ways(engine, PROMPTS, "rerank", expected)
    # the ordering a rerank reports is HF's
    got = [v[0] for v in _pool(engine, PROMPTS, "rerank")]
    assert sorted(range(5), key=lambda i: -got[i]) == sorted(range(5), key=lambda i: -expected[i][0])


def test_generation_and_the_wrong_task_are_refused(tmp_path, tiny_llama_engine):
    from transformers import AutoModelForSequenceClassification

    hf = _hf(AutoModelForSequenceClassification, "llama", seed=5, num_labels=2)
    engine = _build(_save(hf, tmp_path / "hf"), tmp_path / "e")
    core = EngineCore(load_engine(engine), RuntimeConfig(kv_cache_memory=16 << 20))
    with pytest.raises(UserError, match="a classifier: it pools and does not generate"):
        core.check(GenerateRequest([5, 6], SamplingParams(max_tokens=4)))
    with pytest.raises(UserError, match="serves 'classify' requests, not 'embed'"):
        core.check(GenerateRequest([5, 6], PREFILL, RequestOptions(pooling="embed")))
    llm = EngineCore(load_engine(tiny_llama_engine), RuntimeConfig(kv_cache_memory=16 << 20))
    with pytest.raises(UserError, match="has no pooling head"):
        llm.check(GenerateRequest([5, 6], PREFILL, RequestOptions(pooling="embed")))


def test_a_classifier_needs_its_head_and_mean_pooling_needs_embed(tmp_path):
    from transformers import AutoModelForCausalLM

    src = _save(_hf(AutoModelForCausalLM, "llama", seed=6), tmp_path / "hf")
    with pytest.raises(UserError, match="needs a sequence-classification checkpoint"):
        _build(src, tmp_path / "e1", pooling="classify")
    with pytest.raises(UserError, match="applies to embedding models"):
        _build(src, tmp_path / "e2", pooling="rerank", pooling_method="mean", rerank_tokens=("y", "n"))
    with pytest.raises(UserError, match="the tokenizer has no token 'yes'"):
        _build(src, tmp_path / "e3", pooling="rerank")
    assert not any((tmp_path / f"e{i}").exists() for i in (1, 2, 3))
