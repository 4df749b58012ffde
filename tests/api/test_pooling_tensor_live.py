"""The pooling endpoints over tensor models on a live `trtserve run REPO_DIR` (docs/pooling.md, "Tensor
models"): an ONNX cross-encoder behind /v1/rerank, /v2/rerank (the cohere SDK) and /v1/score, an ONNX
three-label classifier behind /classify, the worked example's embedder behind /v1/score (cosine), each
equal to onnxruntime run here on the same tokens (1e-5); a rerank's documents batched by the dynamic
batcher; the `task` label on /metrics; the 400s."""

from __future__ import annotations

import math

import httpx
import numpy as np
import onnxruntime as ort
import pytest
from conftest import Server
from tensor_models import example_module
from tensor_pooling_models import INTENTS, add_pooling_models

EXAMPLE = example_module()  # examples/tensor-repo/make_repo.py
pytestmark = pytest.mark.timeout(300)
T = 30  # s: every client call's timeout
ATOL = 1e-5
QUERY = "what batches requests"
DOCS = [
    "a model server batches requests from many clients",
    "the quick brown fox jumps over the lazy dog",
    "images are decoded resized and normalized",
    "tensor models have fixed shapes and no kv cache",
    "embeddings map text to vectors",
]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = EXAMPLE.make_repo(tmp_path_factory.mktemp("pool-repo") / "repo")
    add_pooling_models(root, EXAMPLE.tokenizer())
    return root


@pytest.fixture(scope="module")
def srv(repo, tmp_path_factory):
    s = Server(repo, log=tmp_path_factory.mktemp("logs") / "pool.log")
    yield s
    s.stop()


class Reference:
    """What the server should answer: the tokenizer and onnxruntime, in process."""

    def __init__(self, repo):
        self.tok = EXAMPLE.tokenizer()
        self.cross = ort.InferenceSession(str(repo / "cross_net" / "1" / "model.onnx"))
        self.intent = ort.InferenceSession(str(repo / "intent_net" / "1" / "model.onnx"))
        self.encoder = ort.InferenceSession(str(repo / "encoder" / "1" / "model.onnx"))

    @staticmethod
    def _run(session, encodings) -> np.ndarray:
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        (out,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
        return out.astype(np.float64)

    def cross_scores(self, pairs) -> list[float]:
        logits = self._run(self.cross, self.tok.encode_batch(pairs))
        return [1 / (1 + math.exp(-x)) for x in logits[:, 0]]

    def intent_probs(self, texts) -> np.ndarray:
        logits = self._run(self.intent, self.tok.encode_batch(texts))
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def embedding(self, text) -> np.ndarray:
        return self._run(self.encoder, [self.tok.encode(text)])[0]


@pytest.fixture(scope="module")
def ref(repo) -> Reference:
    return Reference(repo)


def _post(srv, path: str, body: dict) -> httpx.Response:
    return httpx.post(srv.url + path, json=body, timeout=T)


def test_cross_encoder_rerank_equals_onnxruntime(srv, ref):
    r = _post(srv, "/v1/rerank", {"model": "cross_encoder", "query": QUERY, "documents": DOCS, "top_n": 3})
    assert r.status_code == 200, r.text
    expected = ref.cross_scores([(QUERY, d) for d in DOCS])
    order = sorted(range(len(DOCS)), key=lambda i: -expected[i])[:3]
    results = r.json()["results"]
    assert [x["index"] for x in results] == order
    for x in results:
        assert x["relevance_score"] == pytest.approx(expected[x["index"]], abs=ATOL)
        assert x["document"]["text"] == DOCS[x["index"]]


def test_cohere_sdk_v2_rerank(srv, ref):
    cohere = pytest.importorskip("cohere")
    co = cohere.ClientV2(api_key="unused", base_url=srv.url, timeout=T)
    got = co.rerank(model="cross_encoder", query=QUERY, documents=DOCS)
    expected = ref.cross_scores([(QUERY, d) for d in DOCS])
    assert [x.index for x in got.results] == sorted(range(len(DOCS)), key=lambda i: -expected[i])
    assert [x.relevance_score for x in got.results] == pytest.approx(sorted(expected, reverse=True), abs=ATOL)


def test_score_one_to_many_and_pairwise(srv, ref):
    r = _post(srv, "/v1/score", {"model": "cross_encoder", "text_1": QUERY, "text_2": DOCS})
    assert r.status_code == 200, r.text
    got = [d["score"] for d in r.json()["data"]]
    assert got == pytest.approx(ref.cross_scores([(QUERY, d) for d in DOCS]), abs=ATOL)
    left = ["tensor models", "the lazy dog"]
    r = _post(srv, "/score", {"model": "cross_encoder", "text_1": left, "text_2": DOCS[:2]})
    got = [d["score"] for d in r.json()["data"]]
    assert got == pytest.approx(ref.cross_scores(list(zip(left, DOCS[:2], strict=True))), abs=ATOL)


def test_classifier_equals_onnxruntime_softmax(srv, ref):
    r = _post(srv, "/classify", {"model": "intent", "input": DOCS})
    assert r.status_code == 200, r.text
    expected = ref.intent_probs(DOCS)
    for row, want in zip(r.json()["data"], expected, strict=True):
        assert row["probs"] == pytest.approx(list(want), abs=ATOL)
        assert row["label"] == INTENTS[int(np.argmax(want))] and row["num_classes"] == len(INTENTS)
    r = _post(srv, "/pooling", {"model": "intent", "input": DOCS[0]})
    logits = np.log(expected[0]) - np.log(expected[0]).mean()
    raw = np.array(r.json()["data"][0]["data"])
    assert raw - raw.mean() == pytest.approx(logits, abs=1e-4)  # logits up to a constant


def test_embedder_scores_by_cosine(srv, ref):
    r = _post(srv, "/v1/score", {"model": "embedder", "text_1": QUERY, "text_2": DOCS[:3]})
    assert r.status_code == 200, r.text
    q = ref.embedding(QUERY)
    want = [float(q @ ref.embedding(d) / np.linalg.norm(q) / np.linalg.norm(ref.embedding(d))) for d in DOCS[:3]]
    assert [d["score"] for d in r.json()["data"]] == pytest.approx(want, abs=ATOL)


def test_a_rerank_is_batched_by_the_dynamic_batcher(srv):
    def stats() -> dict:
        (entry,) = httpx.get(srv.url + "/v2/models/cross_net/stats", timeout=T).json()["model_stats"]
        return entry

    before = stats()
    docs = [f"{DOCS[i % len(DOCS)]} {i}" for i in range(48)]
    r = _post(srv, "/v1/rerank", {"model": "cross_encoder", "query": QUERY, "documents": docs})
    assert r.status_code == 200, r.text
    after = stats()
    inferred = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferred == 48 and executions < 48  # batches of more than one document


def test_refusals_name_what_to_do(srv):
    r = _post(srv, "/classify", {"model": "cross_encoder", "input": "a"})
    assert r.status_code == 400 and "text_input" in r.json()["error"]["message"]
    r = _post(srv, "/v1/rerank", {"model": "intent", "query": "a", "documents": ["b"]})
    assert r.status_code == 400 and "cross-encoder" in r.json()["error"]["message"]
    r = _post(srv, "/v1/rerank", {"model": "classifier", "query": "a", "documents": ["b"]})
    assert r.status_code == 400 and "pooling_task" in r.json()["error"]["message"]
    r = _post(srv, "/v1/score", {"model": "cross_encoder", "text_1": "a", "text_2": "b", "truncate_prompt_tokens": 4})
    assert r.status_code == 400 and "truncate_prompt_tokens" in r.json()["error"]["message"]


def test_metrics_carry_the_task(srv):
    _post(srv, "/v1/score", {"model": "cross_encoder", "text_1": "a", "text_2": ["b", "c"]})
    text = httpx.get(srv.url + "/metrics", timeout=T).text
    line = next(
        x for x in text.splitlines() if x.startswith("trtserve_pooling_requests_total{") and 'task="score"' in x
    )
    assert 'model="cross_encoder"' in line and 'outcome="ok"' in line
    assert any(x.startswith("trtserve_pooling_inputs_total{") and 'task="rerank"' in x for x in text.splitlines())
