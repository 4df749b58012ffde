"""The OpenAI Batch API on a live server, driven by the official `openai` client: end to end,
SIGKILL halfway and resume, cancel, expiry, and malformed input named by line number."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from conftest import Server

pytestmark = pytest.mark.timeout(300)
FINAL = ("completed", "failed", "expired", "cancelled")
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "model",
    "server",
    "paged",
    "attention",
    "blocks",
]


def _body(i: int, max_tokens: int) -> dict:
    prompt = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(2 + i % 5))
    return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}


def _jsonl(n: int, max_tokens: int) -> bytes:
    rows = [
        {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/completions", "body": _body(i, max_tokens)}
        for i in range(n)
    ]
    return "\n".join(json.dumps(r) for r in rows).encode() + b"\n"


def _client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def _wait(client, batch_id: str, until=FINAL, timeout: float = 120, check=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        b = client.batches.retrieve(batch_id)
        if b.status in until or (check is not None and check(b)):
            return b
        time.sleep(0.05)
    raise AssertionError(f"batch {batch_id} stayed {b.status} ({b.request_counts})")


def _submit(client, data: bytes, window: str = "24h"):
    f = client.files.create(file=("input.jsonl", data), purpose="batch")
    return client.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window=window)


def _lines(client, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def _online(server: Server, bodies: list[dict]) -> list[str]:
    with ThreadPoolExecutor(16) as pool:
        rs = list(pool.map(lambda b: httpx.post(server.url + "/v1/completions", json=b, timeout=120), bodies))
    return [r.json()["choices"][0]["text"] for r in rs]


@pytest.fixture(scope="module")
def live(tiny_llama_engine, tmp_path_factory):
    """One server for the module; the SIGKILL test replaces it with its restart on the same state dir."""
    d = tmp_path_factory.mktemp("batch")
    (d / "run.yaml").write_text("max_file_bytes: 65536\nbatch_max_in_flight: 2\n")
    args = ("--kv-cache-memory", "64MiB", "--state-dir", str(d / "state"), "--config", str(d / "run.yaml"))
    holder = {"server": Server(tiny_llama_engine, *args, log=d / "first.log"), "args": args, "dir": d}
    yield holder
    holder["server"].stop()


@pytest.fixture
def batch_server(live) -> Server:
    return live["server"]


def test_openai_client_runs_a_batch_of_50_end_to_end(batch_server):
    client = _client(batch_server)
    batch = _submit(client, _jsonl(50, 4))
    assert batch.status == "validating" and batch.endpoint == "/v1/completions"
    done = _wait(client, batch.id)
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (50, 50, 0)
    assert done.in_progress_at and done.finalizing_at and done.completed_at and done.error_file_id is None
    out = _lines(client, done.output_file_id)
    assert [o["custom_id"] for o in out] == [f"req-{i}" for i in range(50)]  # input order
    assert all(o["error"] is None and o["response"]["status_code"] == 200 for o in out)
    assert all(o["id"].startswith("batch_req_") and o["response"]["body"]["object"] == "text_completion" for o in out)
    online = _online(batch_server, [_body(i, 4) for i in range(0, 50, 7)])
    assert [out[i]["response"]["body"]["choices"][0]["text"] for i in range(0, 50, 7)] == online
    # listing, paging and files
    assert client.batches.retrieve(batch.id).output_file_id == done.output_file_id
    second = _submit(client, _jsonl(1, 1))
    page = client.batches.list(limit=1)
    assert [b.id for b in page.data] == [second.id] and page.has_more
    assert [b.id for b in client.batches.list(limit=5, after=second.id).data][0] == batch.id
    out_file = client.files.retrieve(done.output_file_id)
    assert out_file.purpose == "batch_output" and out_file.bytes == len(
        client.files.content(done.output_file_id).content
    )
    assert done.output_file_id in {f.id for f in client.files.list().data}
    _wait(client, second.id)


def test_malformed_input_fails_validation_naming_each_line(batch_server):
    client = _client(batch_server)
    good = {"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "max_tokens": 1}}
    lines = [
        json.dumps(good),
        '{"custom_id": "b", "method": "POST", "url": "/v1/completions", "body": {',  # line 2: cut short
        json.dumps({**good, "custom_id": "c", "url": "/v1/chat/completions"}),  # line 3: wrong endpoint
        json.dumps(good),  # line 4: duplicate custom_id
        "[1, 2]",  # line 5: not an object
    ]
    batch = _submit(client, "\n".join(lines).encode())
    failed = _wait(client, batch.id)
    assert failed.status == "failed" and failed.failed_at and failed.output_file_id is None
    errors = [(e.line, e.code) for e in failed.errors.data]
    assert errors == [
        (2, "invalid_json_line"),
        (3, "invalid_url"),
        (4, "duplicate_custom_id"),
        (5, "invalid_json_line"),
    ]
    assert "line 4" in failed.errors.data[2].message and "line 1" in failed.errors.data[2].message
    empty = _wait(client, _submit(client, b"\n\n").id)
    assert empty.status == "failed" and empty.errors.data[0].code == "empty_file"
    # Requests the endpoint refuses are that line's error, in the error file; the rest run.
    bad_body = {**good, "custom_id": "bad", "body": {"prompt": "x", "max_tokens": 0}}
    mixed = _wait(client, _submit(client, (json.dumps(good) + "\n" + json.dumps(bad_body)).encode()).id)
    assert mixed.status == "completed" and (mixed.request_counts.completed, mixed.request_counts.failed) == (1, 1)
    (err,) = _lines(client, mixed.error_file_id)
    assert err["custom_id"] == "bad" and err["response"]["status_code"] == 400
    assert err["response"]["body"]["error"]["param"] == "max_tokens"
    assert [o["custom_id"] for o in _lines(client, mixed.output_file_id)] == ["a"]


def test_bad_requests_are_4xx_never_500(batch_server):
    url = batch_server.url
    r = httpx.post(url + "/v1/files", files={"file": ("x.jsonl", b"{}")}, data={"purpose": "fine-tune"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "purpose"
    r = httpx.post(url + "/v1/files", files={"file": ("x.jsonl", b"x" * 70000)}, data={"purpose": "batch"})
    assert r.status_code == 413 and "65536" in r.json()["error"]["message"]
    r = httpx.post(url + "/v1/batches", json={"input_file_id": "file-nope", "endpoint": "/v1/completions"})
    assert r.status_code == 404
    r = httpx.post(url + "/v1/batches", json={"input_file_id": "f", "endpoint": "/v1/embeddings"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "endpoint"
    r = httpx.post(
        url + "/v1/batches", json={"input_file_id": "f", "endpoint": "/v1/completions", "completion_window": "soon"}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "completion_window"
    assert httpx.get(url + "/v1/batches/batch_nope").status_code == 404
    assert httpx.get(url + "/v1/files/file-nope/content").status_code == 404
    assert httpx.delete(url + "/v1/files/file-nope").status_code == 404


def test_cancel_mid_batch_keeps_what_finished(batch_server):
    client = _client(batch_server)
    batch = _submit(client, _jsonl(300, 48))  # 40 such lines can finish in under a second on a fast CPU
    _wait(client, batch.id, check=lambda b: b.request_counts.completed >= 3)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at
    done = _wait(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at
    out = _lines(client, done.output_file_id)
    assert 3 <= len(out) == done.request_counts.completed < 300
    assert len({o["custom_id"] for o in out}) == len(out)
    batch_server.wait_idle()  # the in-flight lines were aborted in the engine
    r = httpx.post(f"{batch_server.url}/v1/batches/{batch.id}/cancel")
    assert r.status_code == 409
    # The input of a finished batch can be deleted; its bytes go with it.
    assert client.files.delete(done.input_file_id).deleted
    assert httpx.get(f"{batch_server.url}/v1/files/{done.input_file_id}").status_code == 404


def test_an_expired_batch_ends_expired_with_every_line_accounted_for(batch_server):
    client = _client(batch_server)
    # trtserve takes short windows (OpenAI only 24h); 40 such lines finished inside 1 s on a Xeon with AMX
    batch = _submit(client, _jsonl(300, 64), window="1s")  # 300 lines: the file stays under the 64 KiB limit
    done = _wait(client, batch.id)
    assert done.status == "expired" and done.expired_at
    ran = [o["custom_id"] for o in _lines(client, done.output_file_id)]
    errors = _lines(client, done.error_file_id)
    assert all(e["error"]["code"] == "batch_expired" and e["response"] is None for e in errors)
    assert sorted(ran + [e["custom_id"] for e in errors]) == sorted(f"req-{i}" for i in range(300))


def _committed(state_dir, batch_id: str) -> dict[int, str]:
    with sqlite3.connect(state_dir / "state.sqlite3") as db:
        rows = db.execute("SELECT line, record FROM batch_results WHERE batch_id = ?", (batch_id,)).fetchall()
    return {line: json.loads(rec)["id"] for line, rec in rows}


def test_sigkill_halfway_then_restart_finishes_every_line_once(live, tiny_llama_engine):
    client = _client(live["server"])
    batch = _submit(client, _jsonl(50, 16))
    _wait(client, batch.id, check=lambda b: b.request_counts.completed >= 8)
    keyed = {"prompt": "A model server", "max_tokens": 5, "temperature": 0}
    first = httpx.post(live["server"].url + "/v1/completions", json=keyed, headers={"Idempotency-Key": "survive"})
    assert live["server"].stop(signal.SIGKILL) == -signal.SIGKILL
    before = _committed(live["dir"] / "state", batch.id)
    assert 8 <= len(before) < 50
    s = live["server"] = Server(tiny_llama_engine, *live["args"], log=live["dir"] / "second.log")
    client = _client(s)
    done = _wait(client, batch.id)
    assert done.status == "completed"
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (50, 50, 0)
    out = _lines(client, done.output_file_id)
    assert [o["custom_id"] for o in out] == [f"req-{i}" for i in range(50)]  # each once, none lost
    # Lines committed before the kill were not run again: their records are the ones written then.
    assert {n: out[n - 1]["id"] for n in before} == before
    texts = [o["response"]["body"]["choices"][0]["text"] for o in out]
    assert texts == _online(s, [_body(i, 16) for i in range(50)])
    # An Idempotency-Key answered before the kill is replayed after it.
    again = httpx.post(s.url + "/v1/completions", json=keyed, headers={"Idempotency-Key": "survive"})
    assert again.headers.get("idempotent-replayed") == "true" and again.content == first.content


def test_cli_submits_waits_and_saves_results(batch_server, tmp_path):
    import subprocess
    import sys

    (tmp_path / "in.jsonl").write_bytes(_jsonl(5, 2))
    out = tmp_path / "out.jsonl"
    cli = [sys.executable, "-m", "trtserve.cli", "batch"]
    r = subprocess.run(
        [
            *cli,
            "submit",
            str(tmp_path / "in.jsonl"),
            "--endpoint",
            "/v1/completions",
            "--wait",
            "-o",
            str(out),
            "--url",
            batch_server.url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    batch_id = r.stdout.splitlines()[0]
    assert "completed (5 completed, 0 failed of 5)" in r.stdout
    assert [json.loads(x)["custom_id"] for x in out.read_text().splitlines()] == [f"req-{i}" for i in range(5)]
    r = subprocess.run(
        [*cli, "status", "batch_nope", "--url", batch_server.url], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and "404" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert batch_id.startswith("batch_")


def test_state_dir_none_busy_and_default(tiny_llama_engine, tmp_path, monkeypatch):
    """In process, without the lifespan (nothing loads): which store a server opens."""
    from fastapi.testclient import TestClient

    from trtserve.engine.errors import UserError
    from trtserve.serve.app import create_app
    from trtserve.serve.config import ServeConfig
    from trtserve.state import StateStore, default_state_dir

    app = create_app(tiny_llama_engine, ServeConfig(state_dir="none"))
    assert app.state.server.store is None
    r = TestClient(app).get("/v1/batches")
    assert r.status_code == 404 and "--state-dir" in r.json()["error"]["message"]
    held = StateStore(tmp_path / "held")
    try:
        with pytest.raises(UserError, match="in use by another trtserve"):
            create_app(tiny_llama_engine, ServeConfig(state_dir=str(tmp_path / "held")))
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
        app = create_app(tiny_llama_engine, ServeConfig())
        store = app.state.server.store
        assert store.root == default_state_dir(tiny_llama_engine.name) and store.root.is_relative_to(tmp_path / "data")
        # A second server on the busy default dir runs without durable features instead of failing.
        assert create_app(tiny_llama_engine, ServeConfig()).state.server.store is None
        store.close()
    finally:
        held.close()
