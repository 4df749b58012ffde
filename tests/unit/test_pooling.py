"""Pooling without a model (docs/pooling.md): the architecture table, the feature's rows and chunk-by-chunk
mean, the request bodies' pairing rules, the rerank response's order, the kind's detector."""

from __future__ import annotations

import json

import pytest
import torch

from trtserve.engine.errors import UserError
from trtserve.engine.ids import RequestId, SequenceId
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.pooling import PoolingConfig, RerankPrompt, sigmoid, softmax
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams
from trtserve.models.pooling import PoolingHead, causal_architectures, pooling_architecture, pooling_task
from trtserve.runtime.features.pooling import NoPooling, Pooling
from trtserve.runtime.request import Request
from trtserve.runtime.schedule import ScheduledChunk
from trtserve.serve.pooling.kind import pooling_dir
from trtserve.serve.pooling.protocol import RerankRequest, ScoreRequest, rerank_response

PREFILL = SamplingParams(max_tokens=1, temperature=0.0)


def test_pooling_architectures_read_as_their_causal_family():
    assert pooling_architecture("Qwen3ForSequenceClassification") == ("Qwen3ForCausalLM", "classify")
    assert pooling_architecture("LlamaModel") == ("LlamaForCausalLM", "embed")
    assert pooling_architecture("Qwen2ForCausalLM") is None
    assert causal_architectures(["Qwen2ForSequenceClassification"]) == ["Qwen2ForCausalLM"]
    assert pooling_task(["Qwen3ForCausalLM"]) is None and pooling_task(["Qwen3Model"]) == "embed"


def _request(n: int, task="embed") -> Request:
    return Request(SequenceId(RequestId.new()), list(range(3, 3 + n)), PREFILL, 0, RequestOptions(pooling=task))


def _feature(method: str) -> Pooling:
    return Pooling(PoolingHead(PoolingConfig(task="embed", method=method, normalize=False, dimensions=2), None))


def test_last_token_pooling_asks_for_the_last_row_of_the_last_chunk_only():
    f, r = _feature("last"), _request(10)
    assert f.rows(ScheduledChunk(r, 0, 6)) == []
    assert f.rows(ScheduledChunk(r, 6, 4)) == [3]
    assert not f.every_position(r) and f.take(ScheduledChunk(r, 6, 4), torch.tensor([[1.0, 2.0]])) == [1.0, 2.0]


def test_mean_pooling_sums_chunk_by_chunk_and_restarts_after_preemption():
    f, r = _feature("mean"), _request(4)
    assert f.every_position(r) and f.rows(ScheduledChunk(r, 0, 3)) == [0, 1, 2]
    assert f.take(ScheduledChunk(r, 0, 3), torch.ones(3, 2)) is None
    assert f.take(ScheduledChunk(r, 0, 3), torch.zeros(3, 2)) is None  # preempted: recomputed from 0
    assert f.take(ScheduledChunk(r, 3, 1), torch.tensor([[4.0, 8.0]])) == [1.0, 2.0]
    assert not f._sums


def test_the_feature_checks_the_task_and_refuses_generation():
    f = _feature("last")
    f.check(GenerateRequest([3], PREFILL, RequestOptions(pooling="embed")))
    with pytest.raises(UserError, match="pools and does not generate"):
        f.check(GenerateRequest([3], PREFILL))
    with pytest.raises(UserError, match="not 'rerank'"):
        f.check(GenerateRequest([3], PREFILL, RequestOptions(pooling="rerank")))
    with pytest.raises(UserError, match="no pooling head"):
        NoPooling().check(GenerateRequest([3], PREFILL, RequestOptions(pooling="embed")))


def test_heads_normalise_and_score():
    embed = PoolingHead(PoolingConfig(task="embed", dimensions=2), None)
    assert embed.apply(torch.tensor([3.0, 4.0])) == pytest.approx([0.6, 0.8])
    rerank = PoolingConfig(task="rerank", dimensions=1, yes_token_id=5, no_token_id=6)
    head = PoolingHead(rerank, torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    assert head.apply(torch.tensor([2.0, 0.5])) == pytest.approx([1.5])
    assert sigmoid(1.5) == pytest.approx(softmax([0.5, 2.0])[1])
    assert sigmoid(-1000.0) == 0.0 and sigmoid(1000.0) == 1.0


def test_score_pairs_one_to_many_and_one_to_one():
    assert ScoreRequest(text_1="q", text_2=["a", "b"]).pairs() == [("q", "a"), ("q", "b")]
    assert ScoreRequest(text_1=["x", "y"], text_2=["a", "b"]).pairs() == [("x", "a"), ("y", "b")]
    with pytest.raises(ValueError, match="give one text_1, or as many as text_2"):
        ScoreRequest(text_1=["x", "y"], text_2=["a", "b", "c"]).pairs()


def test_rerank_results_come_best_first_with_top_n_and_documents():
    body = RerankRequest(query="q", documents=["a", {"text": "b", "id": 7}, "c"], top_n=2)
    out = rerank_response("m", body, [0.1, 0.9, 0.5], 12, api_version="2")
    assert [(r["index"], r["relevance_score"]) for r in out["results"]] == [(1, 0.9), (2, 0.5)]
    assert out["results"][0]["document"] == {"text": "b", "id": 7} and out["meta"]["api_version"]["version"] == "2"
    bare = rerank_response("m", body.model_copy(update={"return_documents": False, "top_n": 0}), [0.2, 0.2, 0.3], 1)
    assert [r["index"] for r in bare["results"]] == [2, 0, 1] and "document" not in bare["results"][0]


def test_qwen3_rerank_prompt():
    text = RerankPrompt().render("what?", "this.")
    assert text.startswith("<|im_start|>system\nJudge whether the Document")
    assert "<Query>: what?\n<Document>: this.<|im_end|>\n<|im_start|>assistant\n<think>" in text


def test_the_kind_detector_reads_the_manifest(tmp_path):
    assert pooling_dir(tmp_path, tmp_path) is None
    manifest = {
        "created_at": "x", "backend": "torch", "target_device": "cpu", "source": {}, "toolchain": {},
        "build_config": {}, "files": {},
    }  # fmt: skip
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert pooling_dir(tmp_path, tmp_path) is None
    (tmp_path / "manifest.json").write_text(json.dumps(manifest | {"pooling": {"task": "classify"}}))
    assert pooling_dir(tmp_path, tmp_path) == tmp_path
    (tmp_path / "manifest.json").write_text("{")
    assert pooling_dir(tmp_path, tmp_path) is None
