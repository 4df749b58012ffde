"""`trtserve.LLM.embed / classify / score` on pooling engines against HF transformers (docs/pooling.md):
tiny random checkpoints made here, texts tokenized by the checkpoint's own tokenizer (AutoTokenizer) for
the references; float32, 1e-4 absolute."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import POOLING_SHAPE, write_tokenizer

from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.engine.errors import UserError
from trtserve.llm import LLM

ATOL = 1e-4
COMMON = POOLING_SHAPE
QWEN3 = dict(head_dim=32, num_key_value_heads=1)
TEXTS = ["the quick brown fox", "a model server batches requests", "paged attention blocks", "over the lazy dog"]
QUERY = "what batches requests"


def _checkpoint(auto, model_type: str, dest, seed: int, **overrides):
    from transformers import AutoConfig

    torch.manual_seed(seed)
    model = auto.from_config(AutoConfig.for_model(model_type, **(COMMON | overrides)), dtype=torch.float32).eval()
    dest.mkdir(parents=True)
    model.save_pretrained(dest)
    write_tokenizer(dest)
    return model


def _engine(src, out, **cfg):
    build_engine(BuildConfig(model=str(src), tokens_per_block=16, **cfg), out, quiet=True)
    return out


def _ids(src, text: str, special: bool = True) -> torch.Tensor:
    from transformers import AutoTokenizer

    return torch.tensor([AutoTokenizer.from_pretrained(src)(text, add_special_tokens=special)["input_ids"]])


def test_embed_equals_automodel_and_score_is_cosine(tmp_path):
    from transformers import AutoModel

    hf = _checkpoint(AutoModel, "qwen3", tmp_path / "hf", seed=11, **QWEN3)
    with torch.no_grad():
        want = torch.stack([F.normalize(hf(_ids(tmp_path / "hf", t)).last_hidden_state[0, -1], dim=0) for t in TEXTS])
    with LLM(_engine(tmp_path / "hf", tmp_path / "e"), kv_cache_memory="16MiB") as llm:
        got = torch.tensor(llm.embed(TEXTS))
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
        short = torch.tensor(llm.embed(TEXTS[0], dimensions=16))
        torch.testing.assert_close(short[0], F.normalize(want[0, :16], dim=0), atol=ATOL, rtol=0)
        scores = llm.score(TEXTS[0], TEXTS[1:])
        assert scores == pytest.approx([float(want[0] @ want[i]) for i in (1, 2, 3)], abs=ATOL)
        with pytest.raises(UserError, match="classify needs a pooling engine of task classify or rerank"):
            llm.classify("a")


def test_classify_equals_sequence_classification_softmax(tmp_path):
    from transformers import AutoModelForSequenceClassification

    labels = {0: "negative", 1: "neutral", 2: "positive"}
    hf = _checkpoint(AutoModelForSequenceClassification, "llama", tmp_path / "hf", 12, num_labels=3, id2label=labels)
    with torch.no_grad():
        want = [torch.softmax(hf(_ids(tmp_path / "hf", t)).logits[0], dim=0) for t in TEXTS]
    with LLM(_engine(tmp_path / "hf", tmp_path / "e"), kv_cache_memory="16MiB") as llm:
        got = llm.classify(TEXTS)
        with pytest.raises(UserError, match="score needs one"):
            llm.score("a", "b")
    for c, w in zip(got, want, strict=True):
        assert c.probs == pytest.approx(w.tolist(), abs=ATOL)
        assert c.label == labels[int(w.argmax())]


def test_cross_encoder_score_is_the_sigmoid_of_its_one_logit(tmp_path):
    from transformers import AutoModelForSequenceClassification

    hf = _checkpoint(AutoModelForSequenceClassification, "qwen2", tmp_path / "hf", seed=13, num_labels=1)
    with torch.no_grad():  # query with its special tokens, then the document without: as the server pairs them
        pairs = [torch.cat([_ids(tmp_path / "hf", QUERY), _ids(tmp_path / "hf", d, False)], dim=1) for d in TEXTS]
        want = [torch.sigmoid(hf(p).logits[0, 0]).item() for p in pairs]
    with LLM(_engine(tmp_path / "hf", tmp_path / "e"), kv_cache_memory="16MiB") as llm:
        assert llm.score(QUERY, TEXTS) == pytest.approx(want, abs=ATOL)
        assert llm.score([QUERY] * 2, TEXTS[:2]) == pytest.approx(want[:2], abs=ATOL)


def test_reranker_score_is_p_yes_in_its_prompt_format(tmp_path):
    from transformers import AutoModelForCausalLM

    from trtserve.engine.pooling import RerankPrompt

    hf = _checkpoint(AutoModelForCausalLM, "qwen3", tmp_path / "hf", seed=14, max_position_embeddings=512, **QWEN3)
    engine = _engine(tmp_path / "hf", tmp_path / "e", pooling="rerank", rerank_tokens=("y", "n"))
    fmt, src = RerankPrompt(), tmp_path / "hf"
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src)
    yes, no = tok.convert_tokens_to_ids("y"), tok.convert_tokens_to_ids("n")
    want = []
    with torch.no_grad():
        for d in TEXTS:
            pair = fmt.pair.format(instruction=fmt.instruction, query=QUERY, document=d)
            ids = torch.cat([_ids(src, fmt.prefix, False), _ids(src, pair, False), _ids(src, fmt.suffix, False)], 1)
            last = hf(ids).logits[0, -1]
            want.append(torch.sigmoid(last[yes] - last[no]).item())
    with LLM(engine, kv_cache_memory="16MiB") as llm:
        got = llm.score(QUERY, TEXTS)
        (c,) = llm.classify(TEXTS[0])
    assert got == pytest.approx(want, abs=ATOL)
    assert sorted(range(4), key=lambda i: -got[i]) == sorted(range(4), key=lambda i: -want[i])
    assert len(c.probs) == 1


def test_an_llm_refuses_pooling_calls(tiny_llama_engine):
    with LLM(tiny_llama_engine, kv_cache_memory="16MiB") as llm, pytest.raises(UserError, match="this one is an LLM"):
        llm.embed("a")
