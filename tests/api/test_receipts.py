"""Receipts and replay against a live `trtserve run --receipts on` on a deterministic tiny engine:
every front end returns a receipt id; the same request served alone, inside a batch of 31 others,
after a prefix-cache hit and after a preemption replays bit for bit (float32 and bfloat16); a
changed engine is refused; receipts survive a restart; `--receipts hashes` stores no prompt."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

import httpx
import numpy as np
import pytest
import torch
from conftest import Server
from helpers import make_hf_model, random_prompts

from trtserve.serve.receipts.model import Receipt, token_sha256
from trtserve.serve.receipts.replay import ReplayResult, ReplaySequence, compare, params_of

pytestmark = pytest.mark.timeout(600)
KEY = "admin-secret"
ADMIN = {"Authorization": f"Bearer {KEY}"}
HEADER = "x-trtserve-receipt"
BLOCKS = 48  # KV blocks of 16 tokens: TARGET and 31 short requests fit; 6 long ones and TARGET do not
TARGET = random_prompts(1, seed=50, lo=40, hi=41)[0]  # the request every scenario runs
TARGET_TOKENS = 40


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(engine, tmp, dtype: str, *extra: str, receipts: str = "on") -> Server:
    kv = BLOCKS * 16 * 2 * 2 * 2 * 16 * (4 if dtype == "float32" else 2)  # tokens x (k, v) x layers x heads x dim
    cfg = tmp / "run.yaml"
    cfg.write_text(
        "engine:\n  deterministic: true\n  capacity_policy: max_utilization\n"
        f"  kv_cache_memory: {kv}\n  enable_prefix_caching: true\n"
    )
    args = ["--config", str(cfg), "--state-dir", str(tmp / "state"), "--admin-key", KEY, "--receipts", receipts]
    return Server(engine, *args, *extra, log=tmp / f"server-{receipts}.log")


@pytest.fixture(scope="module")
def served_float32(tiny_llama_engine, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("receipts-f32")
    grpc_port = _free_port()
    s = _start(tiny_llama_engine, tmp, "float32", "--grpc-port", str(grpc_port))
    s.grpc, s.tmp, s.engine = f"127.0.0.1:{grpc_port}", tmp, tiny_llama_engine
    yield s
    s.stop()


@pytest.fixture(scope="module")
def bf16_engine(tiny_llama, tmp_path_factory):
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    d = tmp_path_factory.mktemp("bf16")
    src = make_hf_model(d / "hf", "llama", dtype=torch.bfloat16)
    build_engine(BuildConfig(model=str(src), tokens_per_block=16), d / "engine", quiet=True)
    return d / "engine"


@pytest.fixture(scope="module")
def served_bfloat16(served_float32, bf16_engine):
    """The float32 server stopped, and the bfloat16 engine served on its state dir with --receipts hashes."""
    served_float32.stop()  # SIGINT: queued receipts are committed before the store closes
    s = _start(bf16_engine, served_float32.tmp, "bfloat16", receipts="hashes")
    s.tmp, s.engine = served_float32.tmp, bf16_engine
    yield s
    s.stop()


def _complete(s: Server, prompt: list[int], max_tokens: int = TARGET_TOKENS, **kw) -> httpx.Response:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.9, "ignore_eos": True, **kw}
    r = httpx.post(f"{s.url}/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r


def _receipt(s: Server, rid: str) -> Receipt:
    r = httpx.get(f"{s.url}/v1/receipts/{rid}", headers=ADMIN, timeout=30)
    assert r.status_code == 200, r.text
    return Receipt.model_validate(r.json())


def _wait_running(s: Server, n: int) -> None:
    deadline = time.time() + 60
    while s.metric("trtserve_num_requests_running") < n:
        assert time.time() < deadline, "the long requests never ran together"
        time.sleep(0.01)


def _scenarios(s: Server) -> dict[str, str]:
    """Run TARGET alone, in a batch of 31 others, after a prefix-cache hit and after a preemption;
    -> scenario -> receipt id."""
    ids = {"alone": _complete(s, TARGET).headers[HEADER]}
    others = random_prompts(31, seed=51, lo=3, hi=12)  # one KV block each
    with ThreadPoolExecutor(32) as pool:
        target = pool.submit(_complete, s, TARGET)
        rest = [pool.submit(_complete, s, p, 4) for p in others]
        ids["batch"] = target.result().headers[HEADER]
        assert all(r.result().status_code == 200 for r in rest)
    _complete(s, TARGET[:33], 1)  # caches TARGET's first two blocks
    r = _complete(s, TARGET)
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 32
    ids["cache_hit"] = r.headers[HEADER]
    # Six requests of 81 prompt tokens take 36 blocks and need 6 more at their 15th token and 6 more
    # at their 31st: TARGET, admitted in between at the lowest priority, is the first one preempted.
    longs = random_prompts(6, seed=52, lo=81, hi=82)
    preempted = s.metric("trtserve_num_preemptions_total")
    with ThreadPoolExecutor(6) as pool:
        rest = [pool.submit(_complete, s, p, 60) for p in longs]
        _wait_running(s, 6)
        ids["preempted"] = _complete(s, TARGET, priority=-1).headers[HEADER]
        assert all(r.result().status_code == 200 for r in rest)
    assert s.metric("trtserve_num_preemptions_total") > preempted
    return ids


def _replays_identical(s: Server) -> None:
    from trtserve.llm import LLM

    receipts = {name: _receipt(s, rid) for name, rid in _scenarios(s).items()}
    assert receipts["cache_hit"].cache.cached_tokens == 32
    assert receipts["preempted"].cache.preemptions >= 1
    seeds = {r.params["seed"] for r in receipts.values()}
    assert len(seeds) == 4 and None not in seeds  # drawn per request and recorded
    llm = LLM(s.engine, deterministic=True, kv_cache_memory=8 << 20)
    for name, rec in receipts.items():
        assert rec.engine.deterministic and rec.prompt_sha256 == token_sha256(TARGET)
        assert len(rec.outputs[0].token_ids) == TARGET_TOKENS and len(rec.outputs[0].logprobs) == TARGET_TOKENS
        (out,) = llm.generate([TARGET], params_of(rec))  # alone, unchunked, nothing cached: all differ
        lps = [lp.logprob for lp in out.outputs[0].logprobs]
        seqs = [ReplaySequence(index=0, token_ids=out.token_ids, logprobs=lps, finish_reason="length")]
        report = compare(rec, ReplayResult(engine=rec.engine, outputs=seqs, cached_tokens=0), other_engine=False)
        assert report.identical, f"{name}: {report.text()}"


def test_the_same_request_replays_identical_however_it_was_served_float32(served_float32):
    _replays_identical(served_float32)


def test_every_front_end_returns_a_receipt(served_float32):
    import tritonclient.grpc as grpcclient

    s = served_float32
    r = _complete(s, [5, 6, 7], 2)
    assert r.json()["receipt"] == r.headers[HEADER] and r.headers[HEADER].startswith("rcpt-")
    r = httpx.post(f"{s.url}/v1/completions", json={"prompt": [[5, 6], [7, 8]], "max_tokens": 2}, timeout=60)
    assert r.json()["receipt"] == r.headers[HEADER].split(",") and len(r.json()["receipt"]) == 2
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = httpx.post(f"{s.url}/v1/chat/completions", json=chat, timeout=60)
    assert r.json()["receipt"] == r.headers[HEADER]
    model = s.engine.name
    r = httpx.post(f"{s.url}/v2/models/{model}/generate", json={"text_input": "hi", "max_tokens": 2}, timeout=60)
    assert r.json()["receipt"] == r.headers[HEADER]
    infer = {"inputs": [{"name": "text_input", "shape": [1, 1], "datatype": "BYTES", "data": ["hi"]}]}
    r = httpx.post(f"{s.url}/v2/models/{model}/infer", json=infer, timeout=60)
    assert r.json()["parameters"]["receipt"] == r.headers[HEADER]
    with grpcclient.InferenceServerClient(s.grpc) as client:
        text = grpcclient.InferInput("text_input", [1, 1], "BYTES")
        text.set_data_from_numpy(np.array([[b"hi"]], dtype=object))
        resp = client.infer(model, [text]).get_response()
    rid = resp.parameters["receipt"].string_param
    assert rid.startswith("rcpt-")
    rec = _receipt(s, rid)
    assert rec.protocol == "grpc" and rec.outputs[0].sha256 == token_sha256(rec.outputs[0].token_ids)


def test_a_receipt_records_what_replay_needs_and_needs_the_admin_key(served_float32):
    from trtserve.engine.manifest import engine_fingerprint, read_manifest

    s = served_float32
    r = _complete(s, TARGET[:20], 4, seed=7, cache_namespace="docs", context_version=3, user="u1")
    rid = r.headers[HEADER]
    assert httpx.get(f"{s.url}/v1/receipts/{rid}").status_code == 401
    assert httpx.get(f"{s.url}/v1/receipts/rcpt-nope", headers=ADMIN).status_code == 404
    rec = _receipt(s, rid)
    assert rec.engine.fingerprint == engine_fingerprint(read_manifest(s.engine))
    assert rec.engine.backend == "torch" and rec.model == s.engine.name
    assert rec.engine.options == {"deterministic": True}  # the served engine options that change the numbers
    assert rec.params["seed"] == 7 and rec.params["temperature"] == 0.9 and rec.params["max_tokens"] == 4
    assert rec.prompt_token_ids == TARGET[:20] and rec.prompt_sha256 == token_sha256(TARGET[:20])
    assert (rec.cache.namespace, rec.cache.context_version) == ("docs", 3)
    assert rec.ok and rec.outputs[0].finish_reason == "length" and rec.timings.e2e_s > 0
    assert rec.client_id is not None and r.json()["choices"][0]["logprobs"] is None  # not asked: not returned
    assert rec.metrics.completion_tokens == 4 and rec.metrics.e2e_latency > 0  # recorded whether asked or not


def test_a_receipt_holds_the_timings_return_metrics_answered(served_float32):
    s = served_float32
    r = _complete(s, TARGET[:12], 3, seed=3, return_metrics=True)
    rec = _receipt(s, r.headers[HEADER])
    assert rec.format_version == 3
    assert asdict(rec.metrics) == r.json()["usage"]["metrics"]
    assert rec.metrics.queue_time == rec.timings.queue_s and rec.metrics.e2e_latency == rec.timings.e2e_s


def test_replay_cli_on_the_server_and_a_changed_engine_is_refused(served_float32, bf16_engine, tmp_path):
    s = served_float32
    rid = _complete(s, TARGET[:10], 6).headers[HEADER]
    path = tmp_path / "receipt.json"
    cli = [sys.executable, "-m", "trtserve.cli"]
    shown = subprocess.run(
        [*cli, "receipt", "show", rid, "--server", s.url, "--admin-key", KEY, "-o", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(path.read_text())["id"] == rid
    same = subprocess.run(
        [*cli, "replay", str(path), "--server", s.url, "--admin-key", KEY], capture_output=True, text=True, timeout=120
    )
    assert same.returncode == 0 and same.stdout.startswith(f"identical: {rid}"), same.stdout + same.stderr
    # bf16_engine is another engine (another fingerprint): refused before anything is loaded
    other = subprocess.run(
        [*cli, "replay", str(path), "--engine", str(bf16_engine)], capture_output=True, text=True, timeout=120
    )
    assert other.returncode == 2 and "--allow-other-engine" in other.stderr, other.stderr
    from trtserve.cli.replay import load_receipt, replay_offline

    receipt = load_receipt(path)
    result, is_other = replay_offline(receipt, bf16_engine, None, True, "8MiB")
    report = compare(receipt, result, is_other)
    assert report.other_engine and "another engine" in report.text()
    tampered = receipt.model_copy(update={"engine": receipt.engine.model_copy(update={"fingerprint": "0" * 64})})
    r = httpx.post(f"{s.url}/v1/replay", json={"receipt": tampered.model_dump(mode="json")}, headers=ADMIN)
    assert r.status_code == 409 and "--allow-other-engine" in r.json()["error"]["message"]


def test_bfloat16_replays_identical_and_receipts_survive_a_restart_in_hashes_mode(served_float32, request):
    """The float32 server's receipts survive its restart (on the same state dir, now serving the
    bfloat16 engine with --receipts hashes); bfloat16 replays identical; in `hashes` mode no prompt
    token id is stored anywhere."""
    rid = _complete(served_float32, TARGET[:12], 3).headers[HEADER]
    before = _receipt(served_float32, rid)
    s = request.getfixturevalue("served_bfloat16")  # stops the float32 server first
    assert _receipt(s, rid) == before
    _replays_identical(s)
    secret = random_prompts(1, seed=99, lo=30, hi=31)[0]
    hid = _complete(s, secret, 3).headers[HEADER]
    rec = _receipt(s, hid)
    assert rec.mode == "hashes" and rec.prompt_token_ids is None
    assert rec.prompt_sha256 == token_sha256(secret) and rec.num_prompt_tokens == 30
    s.stop()
    with sqlite3.connect(s.tmp / "state" / "state.sqlite3") as db:
        (body,) = db.execute("SELECT body FROM receipts WHERE id = ?", (hid,)).fetchone()
    assert json.loads(body)["prompt_token_ids"] is None
    assert ",".join(map(str, secret)) not in body  # the ids appear nowhere in what was stored
