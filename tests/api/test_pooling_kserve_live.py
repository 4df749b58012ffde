"""KServe v2 infer on pooling engines (docs/pooling.md, "KServe v2"), through the official `tritonclient`
HTTP client against a live `trtserve run REPO_DIR`: a Qwen3 embedder's `embedding` equals HF AutoModel's
normalised last hidden state; a Llama cross-encoder's (one label) `score` per (query, document) pair equals
HF's sigmoid and /v1/score's answer; metadata and config name the tensors; the `task` label on /metrics."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import Server
from helpers import POOLING_SHAPE, write_tokenizer

from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig

tritonhttp = pytest.importorskip("tritonclient.http")
pytestmark = pytest.mark.timeout(300)
T = 30.0  # s: every client call's timeout
ATOL = 1e-4
COMMON = POOLING_SHAPE | {"num_key_value_heads": 1}
QUERY = "what batches requests?"
DOCS = ["The quick brown fox.", "A model server batches requests.", "Paged attention keeps blocks."]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

    src, repo = tmp_path_factory.mktemp("kpool-src"), tmp_path_factory.mktemp("kpool-repo")
    made = {}
    for name, auto, kind, seed, extra in (
        ("embedder", AutoModel, "qwen3", 21, {"head_dim": 32}),
        ("cross", AutoModelForSequenceClassification, "llama", 22, {"num_labels": 1}),
    ):
        torch.manual_seed(seed)
        made[name] = auto.from_config(AutoConfig.for_model(kind, **(COMMON | extra)), dtype=torch.float32).eval()
        made[name].save_pretrained(src / name)
        write_tokenizer(src / name)
        build_engine(BuildConfig(model=str(src / name), tokens_per_block=16), repo / name / "1", quiet=True)
    return src, repo, made


@pytest.fixture(scope="module")
def srv(models, tmp_path_factory):
    s = Server(models[1], "--kv-cache-memory", "32MiB", log=tmp_path_factory.mktemp("logs") / "kpool.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    c = tritonhttp.InferenceServerClient(srv.url.removeprefix("http://"), connection_timeout=T, network_timeout=T)
    yield c
    c.close()


def _ids(src, text: str, special: bool = True) -> torch.Tensor:
    from transformers import AutoTokenizer

    return torch.tensor([AutoTokenizer.from_pretrained(src)(text, add_special_tokens=special)["input_ids"]])


def _bytes(name: str, texts: list[str]):
    x = tritonhttp.InferInput(name, [len(texts)], "BYTES")
    x.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_))
    return x


def test_embedding_equals_hf(client, models):
    src, _, made = models
    result = client.infer("embedder", [_bytes("text", DOCS)])
    got = torch.from_numpy(result.as_numpy("embedding").copy())
    with torch.no_grad():
        want = [F.normalize(made["embedder"](_ids(src / "embedder", d)).last_hidden_state[0, -1], dim=0) for d in DOCS]
    torch.testing.assert_close(got, torch.stack(want), atol=ATOL, rtol=0)


def test_pair_scores_equal_hf_and_v1_score(client, models, srv):
    src, _, made = models
    result = client.infer("cross", [_bytes("query", [QUERY]), _bytes("document", DOCS)])
    got = result.as_numpy("score").tolist()
    with torch.no_grad():
        pairs = [torch.cat([_ids(src / "cross", QUERY), _ids(src / "cross", d, False)], 1) for d in DOCS]
        want = [torch.sigmoid(made["cross"](p).logits[0, 0]).item() for p in pairs]
    assert got == pytest.approx(want, abs=ATOL)
    r = httpx.post(srv.url + "/v1/score", json={"model": "cross", "text_1": QUERY, "text_2": DOCS}, timeout=T)
    assert [d["score"] for d in r.json()["data"]] == pytest.approx(got, abs=1e-6)
    logits = client.infer("cross", [_bytes("text", DOCS[:1])]).as_numpy("probs")
    assert logits.shape == (1, 1)


def test_metadata_config_and_refusals(client, srv):
    meta = client.get_model_metadata("cross")
    assert {i["name"] for i in meta["inputs"]} == {"text", "query", "document"}
    assert {o["name"] for o in meta["outputs"]} == {"logits", "probs", "score"}
    config = client.get_model_config("embedder")
    assert config["parameters"]["pooling_task"]["string_value"] == "embed"
    assert [o["name"] for o in config["output"]] == ["embedding", "score"]
    body = {"inputs": [{"name": "prompt", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}
    r = httpx.post(srv.url + "/v2/models/cross/infer", json=body, timeout=T)
    assert r.status_code == 400 and "'query' with 'document'" in r.json()["error"]
    text = httpx.get(srv.url + "/metrics", timeout=T).text
    assert any(x.startswith("trtserve_pooling_requests_total{") and 'task="embed"' in x for x in text.splitlines())
