"""/v1/embeddings on a live `trtserve run REPO_DIR` holding the worked example (an embedder ensemble:
tokenize step -> ONNX encoder) beside an LLM engine dir, through the official `openai` client,
against a reference computed here (the repository's tokenizer.json + an onnxruntime session)."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import openai
import pytest
from conftest import Server
from tensor_models import example_module
from tokenizers import Tokenizer

EXAMPLE = example_module()  # examples/tensor-repo/make_repo.py

pytestmark = pytest.mark.timeout(300)
T = 30  # s: every client call's timeout
TEXTS = [
    "The quick brown fox jumps over the lazy dog",
    "a model server batches requests",
    "Embeddings map text to vectors so that similar sentences lie close together and far apart",  # truncated
    "zebra unknown words",
]


@pytest.fixture(scope="module")
def repo(tmp_path_factory, tiny_llama_engine) -> Path:
    root = EXAMPLE.make_repo(tmp_path_factory.mktemp("embed-repo") / "repo")
    shutil.copytree(tiny_llama_engine, root / "llm" / "1")
    return root


@pytest.fixture(scope="module")
def srv(repo, tmp_path_factory):
    s = Server(repo, "--kv-cache-memory", "64MiB", log=tmp_path_factory.mktemp("logs") / "embed.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=T, max_retries=0)


class Reference:
    def __init__(self, repo: Path):
        self.tok = Tokenizer.from_file(str(repo / "tokenize" / "1" / "tokenizer.json"))
        self.session = ort.InferenceSession(str(repo / "encoder" / "1" / "model.onnx"))

    def ids(self, text: str) -> list[int]:
        enc = self.tok.encode(text)
        return [i for i, m in zip(enc.ids, enc.attention_mask, strict=True) if m]

    def of_ids(self, ids: list[int]) -> np.ndarray:
        x = np.array([ids], dtype=np.int64)
        (out,) = self.session.run(None, {"input_ids": x, "attention_mask": np.ones_like(x)})
        return out[0]


@pytest.fixture(scope="module")
def ref(repo) -> Reference:
    return Reference(repo)


def _vectors(result) -> np.ndarray:
    assert [d.index for d in result.data] == list(range(len(result.data)))
    assert all(d.object == "embedding" for d in result.data)
    return np.array([d.embedding for d in result.data], dtype=np.float32)


@pytest.mark.parametrize("encoding_format", ["float", None])  # None: the client asks base64 and decodes it
def test_texts_equal_reference(client, ref, encoding_format):
    kwargs = {"encoding_format": encoding_format} if encoding_format else {}
    result = client.embeddings.create(model="embedder", input=TEXTS, **kwargs)
    assert result.object == "list" and result.model == "embedder"
    expected = np.stack([ref.of_ids(ref.ids(t)) for t in TEXTS])
    np.testing.assert_allclose(_vectors(result), expected, atol=1e-5)
    tokens = sum(len(ref.ids(t)) for t in TEXTS)
    assert result.usage.prompt_tokens == tokens and result.usage.total_tokens == tokens


def test_one_string(client, ref):
    result = client.embeddings.create(model="embedder", input=TEXTS[1], encoding_format="float")
    np.testing.assert_allclose(_vectors(result), [ref.of_ids(ref.ids(TEXTS[1]))], atol=1e-5)
    assert result.usage.prompt_tokens == len(ref.ids(TEXTS[1]))


def test_token_arrays_equal_reference(client, ref):
    arrays = [ref.ids(t) for t in TEXTS] + [[3, 4, 5]]
    result = client.embeddings.create(model="embedder", input=arrays, encoding_format="float")
    np.testing.assert_allclose(_vectors(result), np.stack([ref.of_ids(a) for a in arrays]), atol=1e-5)
    assert result.usage.prompt_tokens == sum(len(a) for a in arrays)
    one = client.embeddings.create(model="embedder", input=arrays[0], encoding_format="float")
    np.testing.assert_allclose(_vectors(one), [ref.of_ids(arrays[0])], atol=1e-5)
    # the ONNX encoder alone takes token arrays too (its inputs are input_ids and attention_mask)
    direct = client.embeddings.create(model="encoder", input=arrays, encoding_format="float")
    np.testing.assert_allclose(_vectors(direct), _vectors(result), atol=1e-5)


def test_base64_is_little_endian_float32(srv):
    body = {"model": "embedder", "input": TEXTS[:2]}
    floats = httpx.post(f"{srv.url}/v1/embeddings", json=body | {"encoding_format": "float"}, timeout=T).json()
    b64 = httpx.post(f"{srv.url}/v1/embeddings", json=body | {"encoding_format": "base64"}, timeout=T).json()
    for f, b in zip(floats["data"], b64["data"], strict=True):
        decoded = np.frombuffer(base64.b64decode(b["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(decoded, np.array(f["embedding"], dtype=np.float32))
    assert b64["usage"] == floats["usage"]


def test_dimensions_where_the_model_allows(client, ref):
    result = client.embeddings.create(model="embedder", input=TEXTS[0], dimensions=8, encoding_format="float")
    full = ref.of_ids(ref.ids(TEXTS[0]))[:8]
    np.testing.assert_allclose(_vectors(result)[0], full / np.linalg.norm(full), atol=1e-5)
    same = client.embeddings.create(model="embedder", input=TEXTS[0], dimensions=32, encoding_format="float")
    np.testing.assert_allclose(_vectors(same)[0], ref.of_ids(ref.ids(TEXTS[0])), atol=1e-5)
    with pytest.raises(openai.BadRequestError, match="at most 32"):
        client.embeddings.create(model="embedder", input=TEXTS[0], dimensions=33)
    with pytest.raises(openai.BadRequestError, match="32-dimensional embeddings and does not allow fewer") as err:
        client.embeddings.create(model="encoder", input=[[3, 4]], dimensions=8)
    assert err.value.body["param"] == "dimensions"


@pytest.mark.parametrize(
    ("model", "inp", "match"),
    [
        ("encoder", "hello", "embeds token arrays only"),
        ("embedder", "", "input string is empty"),
        ("embedder", ["a", 3], "mixes or nests types"),
        ("embedder", [[1, 2], []], "empty list"),
        ("embedder", [[1, 10_000]], r"token id 10000 is outside the vocabulary of model 'embedder' \(ids 0 to 47\)"),
        ("encoder", [[48]], r"token id 48 is outside the vocabulary of model 'encoder'"),
    ],
)
def test_bad_requests_are_400_in_openais_shape(client, model, inp, match):
    with pytest.raises(openai.BadRequestError, match=match) as err:
        client.embeddings.create(model=model, input=inp)
    assert err.value.status_code == 400 and err.value.body["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("model", "match"),
    [
        ("llm", r"model 'llm' is an LLM; /v1/embeddings needs an embedding model, e.g. 'embedder', 'encoder'"),
        ("classifier", "model 'classifier' is not an embedding model"),
    ],
)
def test_no_embedding_model_by_that_name_is_404(client, model, match):
    with pytest.raises(openai.NotFoundError, match=match) as err:
        client.embeddings.create(model=model, input="hello")
    assert err.value.body["param"] == "model"


def test_one_call_is_batched(client, srv, ref):
    texts = [f"the quick fox {i} jumps over {i % 5} dogs" for i in range(32)]
    before = httpx.get(f"{srv.url}/v2/models/encoder/stats", timeout=T).json()["model_stats"][0]
    result = client.embeddings.create(model="embedder", input=texts, encoding_format="float")
    np.testing.assert_allclose(_vectors(result), np.stack([ref.of_ids(ref.ids(t)) for t in texts]), atol=1e-5)
    after = httpx.get(f"{srv.url}/v2/models/encoder/stats", timeout=T).json()["model_stats"][0]
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == len(texts) and executions < inferences  # the batcher put inputs together
