"""Pooling models on a live `trtserve run REPO_DIR` (docs/pooling.md): a Qwen3 embedder, a Qwen3 generative
reranker and a Llama classifier built by `trtserve build`, beside an LLM. The official `cohere` SDK's rerank
(v1 and v2) and the `openai` SDK's embeddings.create, unchanged, against references computed here with HF
transformers; score, classify and the refusals over httpx."""

from __future__ import annotations

import base64
import shutil

import httpx
import numpy as np
import openai
import pytest
import torch
import torch.nn.functional as F
from conftest import Server
from helpers import POOLING_SHAPE, write_tokenizer

from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.engine.pooling import RerankPrompt, sigmoid, softmax

pytestmark = pytest.mark.timeout(300)
T = 30  # s: every client call's timeout
ATOL = 1e-4
COMMON = POOLING_SHAPE | {"num_key_value_heads": 1}
QUERY = "what batches requests?"
DOCS = [
    "The quick brown fox jumps over the lazy dog.",
    "A model server turns checkpoints into engines and serves them.",
    "Continuous batching lets requests join and leave at every step.",
    "Paged attention keeps the KV cache in fixed-size blocks.",
]


def _hf(auto, model_type: str, seed: int, **overrides):
    from transformers import AutoConfig

    torch.manual_seed(seed)
    return auto.from_config(AutoConfig.for_model(model_type, **(COMMON | overrides)), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification

    root = tmp_path_factory.mktemp("pooling-src")
    made = {
        "embedder": (_hf(AutoModel, "qwen3", 1, head_dim=32), {}),
        "reranker": (
            _hf(AutoModelForCausalLM, "qwen3", 2, head_dim=32, max_position_embeddings=1024),  # its prompt: ~330 tokens
            {"pooling": "rerank", "rerank_tokens": ("y", "n")},
        ),
        "classifier": (
            _hf(AutoModelForSequenceClassification, "llama", 3, num_labels=3, id2label={0: "a", 1: "b", 2: "c"}),
            {},
        ),
    }
    for name, (model, _) in made.items():
        model.save_pretrained(root / name)
        write_tokenizer(root / name)
    return root, made


@pytest.fixture(scope="module")
def repo(tmp_path_factory, models, tiny_llama_engine):
    src, made = models
    root = tmp_path_factory.mktemp("pooling-repo")
    for name, (_, cfg) in made.items():
        build_engine(BuildConfig(model=str(src / name), tokens_per_block=16, **cfg), root / name / "1", quiet=True)
    shutil.copytree(tiny_llama_engine, root / "llm" / "1")
    return root


@pytest.fixture(scope="module")
def srv(repo, tmp_path_factory):
    s = Server(repo, "--kv-cache-memory", "64MiB", log=tmp_path_factory.mktemp("logs") / "pooling.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def tok(models):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(models[0] / "embedder")


def _post(srv, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{srv.url}{path}", json=body, timeout=T)


def _rerank_reference(models, tok) -> list[float]:
    """Qwen3-Reranker's recipe: prefix, pair and suffix tokenized apart; P(yes) over the two answer tokens."""
    model = models[1]["reranker"][0]
    fmt = RerankPrompt()
    prefix = tok.encode(fmt.prefix, add_special_tokens=False)
    suffix = tok.encode(fmt.suffix, add_special_tokens=False)
    yes, no = tok.convert_tokens_to_ids("y"), tok.convert_tokens_to_ids("n")
    scores = []
    with torch.no_grad():
        for d in DOCS:
            pair = tok.encode(
                fmt.pair.format(instruction=fmt.instruction, query=QUERY, document=d), add_special_tokens=False
            )
            last = model(torch.tensor([prefix + pair + suffix])).logits[0, -1]
            scores.append(float(torch.log_softmax(torch.stack([last[no], last[yes]]), 0)[1].exp()))
    return scores


def test_cohere_sdk_rerank_v1_and_v2_equal_hf(srv, models, tok):
    import cohere

    expected = _rerank_reference(models, tok)
    order = sorted(range(len(DOCS)), key=lambda i: -expected[i])
    v1 = cohere.Client(api_key="unused", base_url=srv.url, timeout=T)
    got = v1.rerank(model="reranker", query=QUERY, documents=DOCS, top_n=3, return_documents=True)
    assert [r.index for r in got.results] == order[:3]
    for r in got.results:
        assert abs(r.relevance_score - expected[r.index]) < ATOL
        assert r.document.text == DOCS[r.index]
    v2 = cohere.ClientV2(api_key="unused", base_url=srv.url, timeout=T)
    got2 = v2.rerank(model="reranker", query=QUERY, documents=DOCS)
    assert [r.index for r in got2.results] == order
    assert all(abs(r.relevance_score - expected[r.index]) < ATOL for r in got2.results)


def test_rerank_documents_as_objects_and_jina_path(srv):
    body = {"model": "reranker", "query": QUERY, "documents": [{"text": d, "id": i} for i, d in enumerate(DOCS)]}
    r = _post(srv, "/rerank", body | {"return_documents": False})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert sorted(x["index"] for x in results) == [0, 1, 2, 3] and "document" not in results[0]
    scores = [x["relevance_score"] for x in results]
    assert scores == sorted(scores, reverse=True)
    kept = _post(srv, "/v1/rerank", body).json()["results"][0]["document"]
    assert kept == {"text": DOCS[kept["id"]], "id": kept["id"]}


def test_openai_sdk_embeddings_equal_automodel(srv, models, tok):
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=T, max_retries=0)
    model = models[1]["embedder"][0]
    with torch.no_grad():
        expected = [
            F.normalize(model(torch.tensor([tok.encode(d)])).last_hidden_state[0, -1], dim=0).numpy() for d in DOCS
        ]
    got = client.embeddings.create(model="embedder", input=DOCS)
    for e, x in zip(got.data, expected, strict=True):
        np.testing.assert_allclose(e.embedding, x, atol=ATOL)
    assert got.usage.prompt_tokens == sum(len(tok.encode(d)) for d in DOCS)
    raw = _post(srv, "/v1/embeddings", {"model": "embedder", "input": DOCS[0], "encoding_format": "base64"})
    np.testing.assert_allclose(
        np.frombuffer(base64.b64decode(raw.json()["data"][0]["embedding"]), "<f4"), expected[0], atol=ATOL
    )
    short = client.embeddings.create(model="embedder", input=DOCS[0], dimensions=16).data[0].embedding
    np.testing.assert_allclose(short, expected[0][:16] / np.linalg.norm(expected[0][:16]), atol=ATOL)


def test_score_one_to_many_one_to_one_and_embedder_cosine(srv, models, tok):
    expected = _rerank_reference(models, tok)
    many = _post(srv, "/v1/score", {"model": "reranker", "text_1": QUERY, "text_2": DOCS}).json()
    assert [d["index"] for d in many["data"]] == [0, 1, 2, 3]
    assert all(abs(d["score"] - e) < ATOL for d, e in zip(many["data"], expected, strict=True))
    one = _post(srv, "/score", {"model": "reranker", "text_1": [QUERY, QUERY], "text_2": DOCS[:2]}).json()
    assert [round(d["score"], 5) for d in one["data"]] == [round(s, 5) for s in expected[:2]]
    bad = _post(srv, "/v1/score", {"model": "reranker", "text_1": [QUERY, QUERY], "text_2": DOCS})
    assert bad.status_code == 400 and "give one text_1, or as many as text_2" in bad.json()["error"]["message"]
    cos = _post(srv, "/v1/score", {"model": "embedder", "text_1": DOCS[0], "text_2": [DOCS[0], DOCS[1]]}).json()
    assert abs(cos["data"][0]["score"] - 1.0) < ATOL and cos["data"][1]["score"] < 1.0


def test_classify_equals_hf_softmax(srv, models, tok):
    model = models[1]["classifier"][0]
    with torch.no_grad():
        expected = [softmax(model(torch.tensor([tok.encode(d)])).logits[0].tolist()) for d in DOCS]
    for path in ("/classify", "/v1/classify"):
        got = _post(srv, path, {"model": "classifier", "input": DOCS}).json()["data"]
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g["probs"], e, atol=ATOL)
            assert g["label"] == "abc"[int(np.argmax(e))] and g["num_classes"] == 3
    raw = _post(srv, "/pooling", {"model": "reranker", "input": DOCS[0]}).json()["data"][0]["data"]
    assert len(raw) == 1 and 0 < sigmoid(raw[0]) < 1


def test_each_kind_is_refused_on_the_other_endpoints(srv):
    gen = _post(srv, "/v1/completions", {"model": "classifier", "prompt": "hi", "max_tokens": 2})
    assert gen.status_code == 400 and "/v1/rerank" in gen.json()["error"]["message"]
    rr = _post(srv, "/v1/rerank", {"model": "llm", "query": "q", "documents": ["d"]})
    assert rr.status_code == 400 and "needs a pooling model" in rr.json()["error"]["message"]
    assert "/v1/chat/completions" in rr.json()["error"]["message"]
    cls = _post(srv, "/v1/rerank", {"model": "classifier", "query": "q", "documents": ["d"]})
    assert cls.status_code == 400 and "it serves /classify" in cls.json()["error"]["message"]
    emb = _post(srv, "/v1/embeddings", {"model": "classifier", "input": "x"})
    assert emb.status_code == 404 and "not an embedding model" in emb.json()["error"]["message"]
    long = _post(srv, "/classify", {"model": "classifier", "input": "word " * 400})
    assert long.status_code == 400 and "truncate_prompt_tokens" in long.json()["error"]["message"]
    cut = _post(srv, "/classify", {"model": "classifier", "input": "word " * 400, "truncate_prompt_tokens": 32})
    assert cut.status_code == 200 and cut.json()["usage"]["prompt_tokens"] == 32
