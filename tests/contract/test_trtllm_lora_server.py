"""`trtserve run` on a `--backend trtllm` engine dir that packs LoRA adapters, TensorRT-LLM replaced by
the 1.2 fake (on the server's PYTHONPATH): the official `openai` client selects adapters by model name,
and vLLM's admin routes load and unload them at run time, on the same serving code as the torch engine."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
from trtllm_fake import load_fake_lora, load_toy_model, pythonpath

fake, fake_lora = load_toy_model(), load_fake_lora()
VOCAB = 320
REPO = Path(__file__).resolve().parents[2]


def offset(path: Path) -> int:
    return fake_lora.adapter_offset(path, VOCAB)


@pytest.fixture(scope="module")
def live(trtllm_lora_dir, tmp_path_factory):
    from api.conftest import Server

    env = {"PYTHONPATH": pythonpath("1.2", str(REPO))}
    s = Server(trtllm_lora_dir, "--kv-cache-memory", "1MiB", env=env, log=tmp_path_factory.mktemp("logs") / "s.log")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key="unused", timeout=30)


@pytest.fixture(scope="module")
def tok(trtllm_lora_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(trtllm_lora_dir / "tokenizer"))


@pytest.fixture(scope="module")
def ids(tok):
    return tok.encode("The quick brown fox")


def text(client, model: str, ids: list[int]) -> str:
    r = client.completions.create(model=model, prompt=ids, max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    return r.choices[0].text


def test_adapters_are_models_and_select_their_weights(client, trtllm_lora_dir, tok, ids):
    base = trtllm_lora_dir.name
    cards = {m.id: m.model_dump() for m in client.models.list()}
    assert cards["sql"]["parent"] == base and cards["chat"]["parent"] == base
    shifts = {
        base: 0,
        "sql": offset(trtllm_lora_dir / "lora" / "sql"),
        "chat": offset(trtllm_lora_dir / "lora" / "chat"),
    }
    for model, shift in shifts.items():
        expected = tok.decode(fake.reference_greedy(ids, 6, VOCAB, shift), skip_special_tokens=True)
        assert text(client, model, ids) == expected, model
    assert len({text(client, m, ids) for m in shifts}) == 3
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt=ids, max_tokens=2)


def test_load_use_and_unload_through_the_admin_routes(live, client, adapters, tok, ids):
    r = httpx.post(
        f"{live.url}/v1/load_lora_adapter", json={"lora_name": "extra", "lora_path": str(adapters["sql2"])}, timeout=30
    )
    assert r.status_code == 200, r.text
    expected = fake.reference_greedy(ids, 6, VOCAB, offset(adapters["sql2"]))
    assert text(client, "extra", ids) == tok.decode(expected, skip_special_tokens=True)
    r = httpx.post(f"{live.url}/v1/unload_lora_adapter", json={"lora_name": "extra"}, timeout=30)
    assert r.status_code == 200, r.text
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="extra", prompt=ids, max_tokens=2)
