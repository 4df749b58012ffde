"""Idempotency-Key on a live server: replays without the engine, 422 and 409, `Prefer: wait`,
a retry storm that runs the engine once, streams, errors, and keys that survive a SIGKILL."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import Server

pytestmark = pytest.mark.timeout(300)
KEY = "sekret"
AUTH = {"Authorization": f"Bearer {KEY}"}


def _finished(server: Server) -> float:
    """Requests the engine ran to the end, over every label (trtserve_request_success)."""
    text = httpx.get(server.url + "/metrics", headers=AUTH).text
    return sum(float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith("trtserve_request_success_total{"))


def _post(server: Server, key: str, body: dict, path: str = "/v1/completions", **headers) -> httpx.Response:
    h = {**AUTH, "Idempotency-Key": key, **{k.replace("_", "-"): v for k, v in headers.items()}}
    return httpx.post(server.url + path, json=body, headers=h, timeout=120)


@pytest.fixture(scope="module")
def live(tiny_llama_engine, tmp_path_factory):
    d = tmp_path_factory.mktemp("idempotency")
    args = ("--kv-cache-memory", "64MiB", "--state-dir", str(d / "state"))
    holder = {"server": Server(tiny_llama_engine, *args, "--api-key", KEY, log=d / "first.log"), "args": args, "dir": d}
    yield holder
    holder["server"].stop()


def test_same_key_same_request_is_replayed_without_the_engine(live):
    s = live["server"]
    body = {"prompt": "The quick brown fox", "max_tokens": 6, "temperature": 0}
    first = _post(s, "replay-1", body)
    assert first.status_code == 200 and "idempotent-replayed" not in first.headers
    ran = _finished(s)
    again = _post(s, "replay-1", body)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content and again.headers["content-type"] == first.headers["content-type"]
    assert _finished(s) == ran
    # A different request under the same key is refused; so is the same body on another endpoint.
    changed = _post(s, "replay-1", {**body, "max_tokens": 7})
    assert changed.status_code == 422 and "different request" in changed.json()["error"]["message"]
    assert (
        _post(s, "replay-1", {"messages": [{"role": "user", "content": "x"}]}, "/v1/chat/completions").status_code
        == 422
    )
    # Errors are final responses too: replayed, not rerun.
    bad = _post(s, "replay-bad", {"prompt": "x", "max_tokens": 0})
    assert bad.status_code == 400
    assert _post(s, "replay-bad", {"prompt": "x", "max_tokens": 0}).content == bad.content
    assert httpx.post(s.url + "/v1/completions", json=body, headers={**AUTH, "Idempotency-Key": ""}).status_code == 400


def test_a_retry_storm_of_20_runs_the_engine_once(live):
    s = live["server"]
    body = {"prompt": "Paged attention keeps", "max_tokens": 48, "temperature": 0, "ignore_eos": True}
    ran = _finished(s)
    with ThreadPoolExecutor(20) as pool:
        rs = list(pool.map(lambda _: _post(s, "storm-1", body, Prefer="wait"), range(20)))
    assert {r.status_code for r in rs} == {200}
    assert len({r.content for r in rs}) == 1
    assert sum("idempotent-replayed" not in r.headers for r in rs) == 1
    assert _finished(s) == ran + 1
    # Without `Prefer: wait`, retries while the first runs get 409 (or the replay once it ended).
    with ThreadPoolExecutor(20) as pool:
        slow = {**body, "max_tokens": 200}  # long enough that the retries arrive while it runs
        rs = list(pool.map(lambda _: _post(s, "storm-2", slow), range(20)))
    assert {r.status_code for r in rs} <= {200, 409} and 409 in {r.status_code for r in rs}
    assert all(r.headers.get("retry-after") for r in rs if r.status_code == 409)
    assert _finished(s) == ran + 2


def test_streams_replay_their_events_and_a_running_stream_is_409(live):
    s = live["server"]
    body = {"prompt": "Continuous batching", "max_tokens": 200, "temperature": 0, "ignore_eos": True, "stream": True}
    h = {**AUTH, "Idempotency-Key": "stream-1"}
    with httpx.stream("POST", s.url + "/v1/completions", json=body, headers=h, timeout=120) as first:
        chunks = first.iter_bytes()
        got = next(chunks)
        assert got.startswith(b"data: ")
        running = _post(s, "stream-1", body)
        assert running.status_code == 409
        waiter: dict = {}
        t = threading.Thread(target=lambda: waiter.setdefault("r", _post(s, "stream-1", body, Prefer="wait")))
        t.start()
        rest = b"".join(chunks)
    t.join(120)
    streamed = got + rest
    assert streamed.endswith(b"data: [DONE]\n\n")
    assert waiter["r"].status_code == 200 and waiter["r"].content == streamed
    replay = _post(s, "stream-1", body)
    assert replay.content == streamed and replay.headers["content-type"].startswith("text/event-stream")


def test_kserve_generate_and_batches_are_idempotent_too(live):
    s = live["server"]
    body = {"text_input": "The quick brown fox", "parameters": {"max_tokens": 4}}
    path = f"/v2/models/{s_model(s)}/generate"
    first = _post(s, "v2-1", body, path)
    assert first.status_code == 200
    assert _post(s, "v2-1", body, path).content == first.content
    up = httpx.post(
        s.url + "/v1/files",
        headers=AUTH,
        files={
            "file": (
                "in.jsonl",
                b'{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x", "max_tokens": 1}}\n',
            )
        },
        data={"purpose": "batch"},
    ).json()
    create = {"input_file_id": up["id"], "endpoint": "/v1/completions", "completion_window": "24h"}
    a, b = _post(s, "batch-1", create, "/v1/batches"), _post(s, "batch-1", create, "/v1/batches")
    assert a.status_code == b.status_code == 200 and a.json()["id"] == b.json()["id"]
    assert len(httpx.get(s.url + "/v1/batches", headers=AUTH).json()["data"]) == 1


def s_model(s: Server) -> str:
    return httpx.get(s.url + "/v1/models", headers=AUTH).json()["data"][0]["id"]


def test_claims_are_scoped_expire_and_are_freed(tmp_path):
    """The store side, directly: scope (the caller's API key), expiry, and the start-up cleanup."""
    from trtserve.serve.idempotency import claim, complete, forget_running, release
    from trtserve.state import StateStore

    s = StateStore(tmp_path)
    assert claim(s, "alice", "k", "fp1", 60)[0] == "new"
    assert claim(s, "alice", "k", "fp1", 60)[0] == "running"
    assert claim(s, "alice", "k", "fp2", 60)[0] == "mismatch"
    assert claim(s, "bob", "k", "fp2", 60)[0] == "new"  # another caller's key space
    complete(s, "alice", "k", 200, [["content-type", "application/json"]], b"{}")
    verdict, row = claim(s, "alice", "k", "fp1", 60)
    assert verdict == "done" and row["status"] == 200 and bytes(row["body"]) == b"{}"
    release(s, "alice", "k")  # only a running claim is released
    assert claim(s, "alice", "k", "fp1", 60)[0] == "done"
    assert forget_running(s) == 1  # bob's, whose process died
    assert claim(s, "bob", "k", "fp3", 60)[0] == "new"
    assert claim(s, "carol", "k", "fp", 0.05)[0] == "new"
    time.sleep(0.1)
    assert claim(s, "carol", "k", "other", 60)[0] == "new"  # expired: the key is free again
    s.close()
