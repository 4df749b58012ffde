"""LoRA adapters served by a live `trtserve run --lora NAME=DIR ...` on the tiny random Llama: each adapter
is a model (/v1/models with its parent, the KServe index, /v2 and tritonclient), greedy outputs equal HF
transformers + PEFT alone and mixed, prefixes are reused within an adapter only, adapters load, replace and
unload through vLLM's admin routes while other requests run, and receipts, replay and metrics name them."""

from __future__ import annotations

import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import numpy as np
import openai
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as triton
from conftest import Server
from helpers import make_lora_adapter, peft_greedy, random_prompts

from trtserve import LLM, SamplingParams
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.cli.replay import replay_offline
from trtserve.engine.errors import UserError
from trtserve.serve.receipts.model import Receipt

pytest.importorskip("peft")
pytestmark = pytest.mark.timeout(300)

KEY = "lora-admin-key"
ADMIN = {"Authorization": f"Bearer {KEY}"}
NEW = 10
ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTERS = {  # name -> (targets, r, alpha)
    "attn": (("q_proj", "v_proj"), 4, 8.0),
    "all": (ALL, 8, 16.0),
    "mlp": (("o_proj", "gate_proj", "up_proj", "down_proj"), 2, 4.0),
}
GREEDY = SamplingParams(max_tokens=NEW, temperature=0.0, ignore_eos=True)
PROMPTS = random_prompts(2, seed=21)


@pytest.fixture(scope="module")
def adapters(tiny_llama, tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("lora-adapters")
    return {
        name: make_lora_adapter(tiny_llama, d / name, targets, r, alpha, seed=i)
        for i, (name, (targets, r, alpha)) in enumerate(ADAPTERS.items())
    }


@pytest.fixture(scope="module")
def lora_server(tiny_llama_engine, adapters, tmp_path_factory):
    """Deterministic mode (batch-invariant), receipts on, an admin key, and the three adapters by --lora."""
    tmp = tmp_path_factory.mktemp("lora-server")
    cfg = tmp / "run.yaml"
    cfg.write_text("engine:\n  deterministic: true\n  lora:\n    max_lora_rank: 8\n")
    flags = [f"--lora={name}={path}" for name, path in adapters.items()]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        flags += ["--grpc-port", str(sock.getsockname()[1])]
    args = ["--config", str(cfg), "--kv-cache-memory", "64MiB", "--admin-key", KEY, "--receipts", "on"]
    s = Server(tiny_llama_engine, *args, "--state-dir", str(tmp / "state"), *flags, log=tmp / "server.log")
    s.grpc = f"127.0.0.1:{flags[-1]}"
    yield s
    s.stop()


@pytest.fixture(scope="module")
def offline(tiny_llama_engine, adapters):
    lora = {"adapters": {k: str(v) for k, v in adapters.items()}}
    return LLM(tiny_llama_engine, lora=lora, deterministic=True, kv_cache_memory=16 << 20)


@pytest.fixture(scope="module")
def expected(tiny_llama, adapters, offline) -> dict:
    """name (None: the base) -> the texts of PROMPTS: the offline engine's, whose tokens equal HF + PEFT's."""
    out = {}
    for name in [*ADAPTERS, None]:
        got = offline.generate(PROMPTS, GREEDY, adapter=name)
        if name is not None:
            assert [o.token_ids for o in got] == peft_greedy(tiny_llama, adapters[name], PROMPTS, NEW), name
        out[name] = [o.text for o in got]
    assert all(out[n] != out[None] for n in ADAPTERS), "an adapter that changes nothing tests nothing"
    return out


@pytest.fixture(scope="module")
def client(lora_server):
    return openai.OpenAI(base_url=f"{lora_server.url}/v1", api_key="x", max_retries=0, timeout=60)


def _complete(client, model: str, prompt, **extra):
    return client.completions.create(
        model=model, prompt=prompt, max_tokens=NEW, temperature=0, extra_body={"ignore_eos": True, **extra}
    )


def _load(server, name: str, path, headers=ADMIN) -> httpx.Response:
    body = {"lora_name": name, "lora_path": str(path)}
    return httpx.post(f"{server.url}/v1/load_lora_adapter", json=body, headers=headers, timeout=60)


def _unload(server, name: str, headers=ADMIN) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/unload_lora_adapter", json={"lora_name": name}, headers=headers, timeout=60)


def test_adapters_are_models_with_their_parent(lora_server, client, model_name):
    cards = {m.id: m for m in client.models.list().data}
    for name in ADAPTERS:
        card = cards[name].model_dump()
        assert card["parent"] == model_name and card["root"].startswith("sha256:") and card["object"] == "model"
    assert "parent" not in cards[model_name].model_dump()
    one = httpx.get(f"{lora_server.url}/v1/models/attn", timeout=30).json()
    assert one["parent"] == model_name and one["root"] == cards["attn"].model_dump()["root"]
    index = httpx.post(f"{lora_server.url}/v2/repository/index", json={}, headers=ADMIN, timeout=30).json()
    assert {e["name"] for e in index} == {model_name, *ADAPTERS}
    assert all(e["state"] == "READY" for e in index)


def test_greedy_outputs_equal_peft_alone_and_in_a_concurrent_mix(client, model_name, expected):
    for name in ADAPTERS:
        r = _complete(client, name, PROMPTS)
        assert [c.text for c in r.choices] == expected[name], name
        assert r.model == name
    jobs = [(name, i) for _ in range(2) for name in [*ADAPTERS, None] for i in range(len(PROMPTS))]
    with ThreadPoolExecutor(len(jobs)) as pool:
        texts = list(pool.map(lambda j: _complete(client, j[0] or model_name, PROMPTS[j[1]]).choices[0].text, jobs))
    assert texts == [expected[name][i] for name, i in jobs]


def test_a_prefix_is_reused_within_an_adapter_and_never_across(client, model_name, offline):
    prompt = random_prompts(1, seed=77, lo=60, hi=61)[0]  # three full blocks of 16 before the last token
    order = ["attn", "all", None, "all", "attn"]
    want = {name: offline.generate([prompt], GREEDY, adapter=name)[0].text for name in set(order)}
    outs = [_complete(client, name or model_name, prompt) for name in order]
    assert [o.choices[0].text for o in outs] == [want[name] for name in order]  # B's own output after A
    cached = [o.usage.prompt_tokens_details.cached_tokens for o in outs]
    assert cached == [0, 0, 0, 48, 48]


def test_chat_responses_and_lora_request_select_adapters(lora_server, client, model_name, offline):
    messages = [{"role": "user", "content": "Hello"}]
    ids = offline.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    want = offline.generate([list(ids["input_ids"])], GREEDY, adapter="mlp")[0].text
    chat = client.chat.completions.create(
        model="mlp", messages=messages, max_tokens=NEW, temperature=0, extra_body={"ignore_eos": True}
    )
    assert chat.choices[0].message.content == want and chat.model == "mlp"
    # TensorRT-LLM's field, beside the base model's name
    lora_request = {"lora_name": "mlp", "lora_int_id": 3, "lora_path": "/ignored"}
    r = _complete(client, model_name, PROMPTS, lora_request=lora_request)
    assert [c.text for c in r.choices] == [o.text for o in offline.generate(PROMPTS, GREEDY, adapter="mlp")]
    with pytest.raises(openai.BadRequestError, match="is not the base of lora_request's adapter"):
        _complete(client, "attn", PROMPTS, lora_request=lora_request)
    resp = client.responses.create(model="attn", input="Hello", max_output_tokens=4, temperature=0)
    assert resp.model == "attn"


def test_kserve_and_tritonclient_select_an_adapter_by_model_name(lora_server, offline):
    want = offline.generate("The quick brown fox", SamplingParams(max_tokens=6, temperature=0.0), adapter="all")
    tc = triton.InferenceServerClient(lora_server.url.removeprefix("http://"), network_timeout=60)
    assert tc.is_model_ready("all")
    assert tc.get_model_metadata("all")["name"] == "all"
    text = triton.InferInput("text_input", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"The quick brown fox"]], dtype=object))
    mt = triton.InferInput("max_tokens", [1], "INT32")
    mt.set_data_from_numpy(np.array([6], dtype=np.int32))
    ex = triton.InferInput("exclude_input_in_output", [1], "BOOL")
    ex.set_data_from_numpy(np.array([True]))
    res = tc.infer("all", [text, mt, ex], outputs=[triton.InferRequestedOutput("text_output")])
    out = res.as_numpy("text_output").reshape(-1)[0]
    assert (out.decode() if isinstance(out, bytes) else out) == want[0].text
    body = {"text_input": "The quick brown fox", "max_tokens": 6, "exclude_input_in_output": True}
    r = httpx.post(f"{lora_server.url}/v2/models/all/generate", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["text_output"] == want[0].text and r.json()["model_name"] == "all"


def test_grpc_model_infer_selects_an_adapter_by_model_name(lora_server, offline):
    want = offline.generate("Paged attention", SamplingParams(max_tokens=5, temperature=0.0), adapter="mlp")[0].text
    client = grpcclient.InferenceServerClient(lora_server.grpc)
    try:
        text = grpcclient.InferInput("text_input", [1, 1], "BYTES")
        text.set_data_from_numpy(np.array([[b"Paged attention"]], dtype=object))
        mt = grpcclient.InferInput("max_tokens", [1, 1], "INT32")
        mt.set_data_from_numpy(np.array([[5]], dtype=np.int32))
        ex = grpcclient.InferInput("exclude_input_in_output", [1, 1], "BOOL")
        ex.set_data_from_numpy(np.array([[True]]))
        res = client.infer("mlp", [text, mt, ex], client_timeout=60)
        assert res.as_numpy("text_output").reshape(-1)[0].decode() == want
        assert client.is_model_ready("mlp") and not client.is_model_ready("nope")
    finally:
        client.close()


def test_an_unknown_adapter_is_the_model_not_found_404(lora_server, client):
    with pytest.raises(openai.NotFoundError, match="model 'nope' is not served here"):
        _complete(client, "nope", PROMPTS)
    r = httpx.post(f"{lora_server.url}/v2/models/nope/generate", json={"text_input": "a"}, timeout=30)
    assert r.status_code == 404 and "model 'nope' is not served here" in r.json()["error"]
    r = _unload(lora_server, "nope")
    assert r.status_code == 404 and "no LoRA adapter named 'nope' is served" in r.json()["error"]["message"]


def test_admin_routes_take_the_admin_key_and_refuse_bad_adapters(
    lora_server, adapters, model_name, tmp_path, tiny_llama
):
    assert _load(lora_server, "x", adapters["attn"], headers={}).status_code == 401
    assert _load(lora_server, "x", adapters["attn"], headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert _unload(lora_server, "attn", headers={}).status_code == 401
    cases = {
        model_name: (adapters["attn"], "is a model this server serves"),
        "nowhere": (tmp_path / "nowhere", "give the dir PEFT's save_pretrained wrote"),
        "big": (
            make_lora_adapter(tiny_llama, tmp_path / "big", ("q_proj",), 16, 16.0),
            "raise the engine's lora.max_lora_rank to at least 16",
        ),
    }
    for name, (path, fix) in cases.items():
        r = _load(lora_server, name, path)
        message = r.json()["error"]["message"]
        assert r.status_code == 400 and fix in message and "\n" not in message, (name, message)
    names = {m["id"] for m in httpx.get(f"{lora_server.url}/v1/models", timeout=30).json()["data"]}
    assert names == {model_name, *ADAPTERS}  # nothing half-loaded


def test_load_use_replace_unload_reload_while_other_requests_run(lora_server, client, model_name, adapters, expected):
    stop, failures, done = threading.Event(), [], []

    def traffic(name: str | None) -> None:
        while not stop.is_set():
            try:
                text = _complete(client, name or model_name, PROMPTS[0]).choices[0].text
                if text != expected[name][0]:
                    failures.append((name, text))
                done.append(name)
            except Exception as err:  # every failure is the test's failure
                failures.append((name, repr(err)))

    threads = [threading.Thread(target=traffic, args=(n,)) for n in ("attn", None, "all", None)]
    for t in threads:
        t.start()
    try:
        r = _load(lora_server, "hot", adapters["mlp"])
        assert r.status_code == 200 and r.text == "Success: LoRA adapter 'hot' added successfully."
        assert [c.text for c in _complete(client, "hot", PROMPTS).choices] == expected["mlp"]
        assert _load(lora_server, "hot", adapters["attn"]).status_code == 200  # replaced in place
        assert [c.text for c in _complete(client, "hot", PROMPTS).choices] == expected["attn"]
        r = _unload(lora_server, "hot")
        assert r.status_code == 200 and r.text == "Success: LoRA adapter 'hot' removed successfully."
        with pytest.raises(openai.NotFoundError):
            _complete(client, "hot", PROMPTS)
        assert _load(lora_server, "hot", adapters["mlp"]).status_code == 200
        assert [c.text for c in _complete(client, "hot", PROMPTS).choices] == expected["mlp"]
        assert _unload(lora_server, "hot").status_code == 200
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert failures == []
    assert {None, "attn", "all"} <= set(done)


def test_structured_outputs_under_an_adapter_are_valid_json(client):
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}},
        "required": ["n", "ok"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    for name in ADAPTERS:
        out = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "?"}], response_format=fmt, max_tokens=60, seed=1
        )
        assert out.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(out.choices[0].message.content), schema)


def test_deterministic_outputs_with_adapters_do_not_depend_on_the_batch(client, model_name):
    def ask(name: str):
        r = _complete(client, name, PROMPTS[1], logprobs=2)
        return r.choices[0].text, r.choices[0].logprobs.token_logprobs

    alone = ask("all")
    mix = ["all", "attn", "mlp", model_name, "all", "attn", "mlp", model_name]
    with ThreadPoolExecutor(len(mix)) as pool:
        outs = list(pool.map(ask, mix))
    assert outs[0] == alone and outs[4] == alone  # bit for bit, whatever ran beside them


def test_receipts_carry_the_adapter_hash_and_replay_needs_it(
    lora_server, client, adapters, tiny_llama, tiny_llama_engine, tmp_path
):
    assert _load(lora_server, "rc", adapters["attn"]).status_code == 200
    root = httpx.get(f"{lora_server.url}/v1/models/rc", timeout=30).json()["root"]
    r = httpx.post(
        f"{lora_server.url}/v1/completions",
        json={"model": "rc", "prompt": PROMPTS[0], "max_tokens": 6, "temperature": 0},
        timeout=60,
    )
    rid = r.json()["receipt"]
    receipt = httpx.get(f"{lora_server.url}/v1/receipts/{rid}", headers=ADMIN, timeout=30).json()
    assert receipt["adapter"] == {"name": "rc", "content_hash": root}

    def replay():
        return httpx.post(f"{lora_server.url}/v1/replay", json={"receipt": receipt}, headers=ADMIN, timeout=60)

    again = replay()
    assert again.status_code == 200
    assert [o["token_ids"] for o in again.json()["outputs"]] == [o["token_ids"] for o in receipt["outputs"]]
    # offline: an engine dir that packs the adapter replays it; one that does not refuses in one sentence
    rec = Receipt.model_validate(receipt)
    with pytest.raises(UserError, match="ran under LoRA adapter rc .*, which is not served here"):
        replay_offline(rec, tiny_llama_engine, None, False, "8MiB")
    packed = tmp_path / "packed"
    build_engine(
        BuildConfig(model=str(tiny_llama), tokens_per_block=16, lora={"rc": adapters["attn"]}), packed, quiet=True
    )
    result, _ = replay_offline(rec, packed, None, True, "8MiB")  # packing makes another engine fingerprint
    assert [o.token_ids for o in result.outputs] == [o["token_ids"] for o in receipt["outputs"]]
    assert _load(lora_server, "rc", adapters["mlp"]).status_code == 200  # other weights under the name
    refused = replay()
    assert refused.status_code == 409 and "is served with other weights" in refused.json()["error"]["message"]
    assert _unload(lora_server, "rc").status_code == 200
    refused = replay()
    assert refused.status_code == 409 and "which is not served here" in refused.json()["error"]["message"]


def test_metrics_count_by_adapter_and_the_adapter_cache(lora_server, client):
    _complete(client, "mlp", PROMPTS)
    text = httpx.get(f"{lora_server.url}/metrics", timeout=30).text
    lines = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line[:1] != "#"}

    def value(name: str, **labels) -> float:
        found = [
            v
            for k, v in lines.items()
            if k.startswith(name + "{") and all(f'{a}="{b}"' in k for a, b in labels.items())
        ]
        assert len(found) == 1, (name, labels)
        return found[0]

    assert value("trtserve_lora_requests_total", adapter="mlp") >= 1
    assert value("trtserve_lora_generation_tokens_total", adapter="mlp") >= 2 * NEW
    assert value("trtserve_lora_prompt_tokens_total", adapter="mlp") >= 1
    assert value("trtserve_lora_adapter_loads_total") >= len(ADAPTERS)
    assert value("trtserve_lora_adapter_hits_total") >= 1
    assert any(k.startswith("trtserve_lora_adapter_evictions_total{") for k in lines)


def test_an_engine_without_the_lora_option_answers_501(server, adapters):
    r = _load(server, "x", adapters["attn"], headers={})  # the plain server: no admin key, loopback
    assert r.status_code == 501 and "start it with the `lora` engine option" in r.json()["error"]["message"]


def test_an_adapter_named_like_the_model_fails_the_load_saying_so(tiny_llama_engine, adapters, model_name, tmp_path):
    s = Server(tiny_llama_engine, f"--lora={model_name}={adapters['attn']}", log=tmp_path / "s.log", until_ready=False)
    try:
        health = httpx.get(f"{s.url}/health", timeout=30).json()
        assert health["status"] == "error" and "is a model this server serves" in health["error"]
    finally:
        s.stop()
