"""A live `trtserve run REPO_DIR` serving two tiny models, one in two versions built from different
seeds: routing, weighted and sticky splits, canary / promote / rollback, shadow traffic, the guard,
hot load and unload, and a restart that restores labels and weights."""

from __future__ import annotations

import asyncio
import math
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
import tritonclient.http as triton
import yaml
from conftest import Server
from helpers import make_hf_model

ADMIN = "adm1n"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
GREEDY = {"max_tokens": 8, "temperature": 0, "extra_body": {"ignore_eos": True}}
pytestmark = pytest.mark.timeout(300)


def _build(tmp: Path, dest: Path, seed: int, **overrides) -> None:
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    hf = make_hf_model(tmp / f"hf-{dest.parent.name}-{dest.name}", "llama", seed=seed, **overrides)
    build_engine(BuildConfig(model=str(hf), tokens_per_block=16), dest, quiet=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """alpha/1 (seed 0), alpha/2 (seed 1), alpha/3 (a copy of 1, for shadow agreement); beta/1 is
    larger (~28 MB of weights) so that its unload shows in the process's RSS."""
    tmp = tmp_path_factory.mktemp("repo-src")
    root = tmp_path_factory.mktemp("repo")
    _build(tmp, root / "alpha" / "1", seed=0)
    _build(tmp, root / "alpha" / "2", seed=1)
    shutil.copytree(root / "alpha" / "1", root / "alpha" / "3")
    _build(tmp, root / "beta" / "1", seed=2, hidden_size=256, intermediate_size=2048, num_hidden_layers=4)
    (root / "alpha" / "policy.yaml").write_text("version_policy: {all: true}\nlabels: {stable: 1}\n")
    return root


@pytest.fixture(scope="module")
def repo_faults(faults):
    """The repository server's fault file (tests/faults/): every engine it loads reads it."""
    return faults("repo")


@pytest.fixture(scope="module")
def srv(repo, repo_faults, tmp_path_factory):
    logs = tmp_path_factory.mktemp("logs")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        grpc_port = sock.getsockname()[1]
    args = ("--kv-cache-memory", "64MiB", "--admin-key", ADMIN, "--grpc-port", str(grpc_port))
    s = Server(repo, *args, launcher=repo_faults.launcher, log=logs / "repo.log")
    s.grpc = f"127.0.0.1:{grpc_port}"
    yield s
    s.stop()


@pytest.fixture(scope="module")
def oai(srv):
    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0)


def _admin(srv, op: str, model: str = "alpha", **body) -> dict:
    r = httpx.post(f"{srv.url}/admin/models/{model}/{op}", json=body, headers=AUTH, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _status(srv) -> dict:
    return httpx.get(f"{srv.url}/admin/repository", headers=AUTH).json()


def _complete(url: str, model: str, headers: dict | None = None, **extra) -> httpx.Response:
    body = {"model": model, "prompt": "The quick", "max_tokens": 1, "temperature": 0, **extra}
    return httpx.post(f"{url}/v1/completions", json=body, headers=headers or {}, timeout=60)


async def _many(url: str, bodies: list[dict], headers: list[dict] | None = None, concurrency: int = 16):
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120) as c:

        async def one(i: int, body: dict):
            async with sem:
                return await c.post("/v1/completions", json=body, headers=(headers or [{}] * len(bodies))[i])

        return await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies)))


def test_routes_by_name_version_and_label_with_official_clients(srv, oai):
    cases = {"alpha": "alpha:1", "alpha:2": "alpha:2", "alpha@stable": "alpha:1", "beta": "beta:1"}
    for asked, answered in cases.items():
        r = oai.completions.create(model=asked, prompt="The quick", **GREEDY)
        assert r.model == answered
    assert (
        oai.chat.completions.create(model="alpha:2", messages=[{"role": "user", "content": "x"}], **GREEDY).model
        == "alpha:2"
    )
    one = oai.completions.create(model="alpha:1", prompt="The quick", **GREEDY).choices[0].text
    two = oai.completions.create(model="alpha:2", prompt="The quick", **GREEDY).choices[0].text
    assert one != two  # different seeds: the pin really reaches another engine
    raw = _complete(srv.url, "alpha:2")
    assert raw.headers["x-model-version"] == "2"
    ids = {m.id for m in oai.models.list().data}
    assert {"alpha", "alpha:1", "alpha:2", "alpha:3", "alpha@stable", "beta", "beta:1"} <= ids
    for bad, code in (("alpha:9", 404), ("alpha@nope", 404), ("gamma", 404)):
        assert _complete(srv.url, bad).status_code == code, bad
    with pytest.raises(openai.NotFoundError):
        oai.completions.create(model="alpha:9", prompt="x", max_tokens=1)

    client = triton.InferenceServerClient(url=srv.url.removeprefix("http://"))
    try:
        text = triton.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(__import__("numpy").array([b"The quick"], dtype=object))
        for version in ("1", "2"):
            res = client.infer("alpha", [text], model_version=version)
            assert res.get_response()["model_version"] == version
        assert client.infer("beta", [text]).get_response()["model_version"] == "1"
        assert client.is_model_ready("alpha", "2") and not client.is_model_ready("alpha", "9")
        assert client.get_model_metadata("alpha")["versions"] == ["1", "2", "3"]
        index = {(m["name"], m["version"]): m["state"] for m in client.get_model_repository_index()}
        assert index == {
            ("alpha", "1"): "READY",
            ("alpha", "2"): "READY",
            ("alpha", "3"): "READY",
            ("beta", "1"): "READY",
        }
    finally:
        client.close()
    gen = httpx.post(f"{srv.url}/v2/models/alpha/versions/2/generate", json={"text_input": "x", "max_tokens": 1})
    assert gen.json()["model_version"] == "2" and gen.headers["x-model-version"] == "2"


def test_grpc_repository_rpcs_and_versioned_infer(srv):
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    c = grpcclient.InferenceServerClient(srv.grpc)
    try:
        index = {(m.name, m.version): m.state for m in c.get_model_repository_index().models}
        assert index[("alpha", "2")] == "READY" and index[("beta", "1")] == "READY"
        text = grpcclient.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([b"The quick"], dtype=object))
        for version in ("1", "2"):
            assert c.infer("alpha", [text], model_version=version).get_response().model_version == version
        assert c.is_model_ready("alpha", "2") and not c.is_model_ready("alpha", "9")
        with pytest.raises(InferenceServerException, match="'alpha' version 9 is not found"):
            c.infer("alpha", [text], model_version="9")
        with pytest.raises(InferenceServerException, match="admin key"):
            c.unload_model("alpha")
        c.load_model(
            "alpha", headers={"authorization": f"Bearer {ADMIN}"}
        )  # every version the policy names is READY: nothing to do
    finally:
        c.close()


def test_admin_routes_take_the_admin_key(srv):
    r = httpx.post(f"{srv.url}/admin/models/alpha/rollback")
    assert r.status_code == 401 and "admin key" in r.json()["error"]["message"]
    r = httpx.post(f"{srv.url}/v2/repository/models/alpha/unload", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401


def test_canary_split_sticky_keys_and_instant_rollback(srv):
    cli = [sys.executable, "-m", "trtserve.cli", "repo", "--url", srv.url, "--admin-key", ADMIN]
    out = subprocess.run([*cli, "canary", "alpha", "2", "--weight", "25"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "weights {'1': 75.0, '2': 25.0}" in out.stdout
    n = 400
    body = {"model": "alpha", "prompt": "The quick", "max_tokens": 1, "temperature": 0}
    rs = asyncio.run(_many(srv.url, [body] * n))
    assert all(r.status_code == 200 for r in rs)
    hits = sum(r.json()["model"] == "alpha:2" for r in rs)
    sd = math.sqrt(n * 0.25 * 0.75)
    assert abs(hits - n * 0.25) < 4.5 * sd, hits  # binomial bound: a false failure has odds < 1e-5
    # Sticky: each key lands on one version, every time, by `user` or by X-Session-Id.
    keys = [f"user-{i}" for i in range(24)]
    first = {}
    for rnd in range(3):
        bodies = [{**body, "user": k} for k in keys] if rnd != 1 else [body] * len(keys)
        headers = [{"X-Session-Id": k} for k in keys] if rnd == 1 else None
        got = asyncio.run(_many(srv.url, bodies, headers))
        for k, r in zip(keys, got, strict=True):
            assert first.setdefault(k, r.json()["model"]) == r.json()["model"], k
    on_canary = [k for k in keys if first[k] == "alpha:2"]
    assert on_canary and len(on_canary) < len(keys)
    # Rollback: the very next request of a key that was on the canary goes to stable.
    status = _admin(srv, "rollback")
    assert status["models"]["alpha"]["weights"] == {} and "canary" not in status["models"]["alpha"]["labels"]
    assert _complete(srv.url, "alpha", user=on_canary[0]).json()["model"] == "alpha:1"
    assert 'trtserve_rollbacks_total{cause="admin",model="alpha"} 1.0' in httpx.get(f"{srv.url}/metrics").text


def test_corrupt_version_fails_to_load_and_the_old_keeps_answering(srv, repo):
    bad = repo / "alpha" / "4"
    shutil.copytree(repo / "alpha" / "2", bad)
    weights = next(p for p in bad.rglob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-64:] = b"\xff" * 64
    weights.write_bytes(bytes(data))
    r = httpx.post(
        f"{srv.url}/v2/repository/models/alpha/load", json={"parameters": {"version": "4"}}, headers=AUTH, timeout=120
    )
    assert r.status_code == 400 and "alpha:4" in r.json()["error"]
    index = httpx.post(f"{srv.url}/v2/repository/index").json()
    entry = next(e for e in index if e["name"] == "alpha" and e["version"] == "4")
    assert entry["state"] == "UNAVAILABLE" and entry["reason"]
    assert _complete(srv.url, "alpha").json()["model"] == "alpha:1"
    pinned = _complete(srv.url, "alpha:4")
    assert pinned.status_code == 503 and pinned.headers["retry-after"]
    shutil.rmtree(bad)


def test_shadow_records_agreement_and_disagreement(srv, oai):
    def run_shadow(version: int) -> dict:
        _admin(srv, "shadow", version=version, fraction=1.0)
        primary = [oai.completions.create(model="alpha", prompt=f"The quick {i}", **GREEDY) for i in range(4)]
        assert all(r.model == "alpha:1" for r in primary)  # only the primary answers
        deadline = time.time() + 60
        while time.time() < deadline:
            shadow = _status(srv)["models"]["alpha"]["shadow"]
            if shadow.get("pairs", 0) >= 4:
                return shadow
            time.sleep(0.1)
        raise AssertionError(f"shadow pairs never arrived: {shadow}")

    same = run_shadow(3)  # a copy of version 1: greedy outputs agree
    assert same["agreement_rate"] == 1.0 and all(p["first_divergence"] is None for p in same["recent"])
    assert all(p["primary_ttft"] > 0 and p["shadow_ttft"] > 0 for p in same["recent"])
    other = run_shadow(2)  # other weights: they diverge, and where is recorded
    assert other["agreement_rate"] < 1.0
    assert any(isinstance(p["first_divergence"], int) for p in other["recent"])
    text = httpx.get(f"{srv.url}/metrics").text
    assert 'trtserve_shadow_agreement_ratio{model="alpha",version="3"} 1.0' in text
    assert 'trtserve_model_version_state{model="alpha",state="READY",version="2"} 1.0' in text
    assert 'trtserve_num_requests_running{model="beta",version="1"}' in text  # engine series per version
    assert 'trtserve_routed_requests_total{decision="shadow",model="alpha",version="2"}' in text
    _admin(srv, "shadow", version=2, fraction=0)


def test_guard_rolls_back_a_failing_canary(srv, repo_faults):
    _admin(srv, "canary", version=2, weight=50, guard="error_rate<0.01", window=3)
    repo_faults.arm("raise")  # the next engine step with work fails: only alpha:2 gets work now
    codes = [_complete(srv.url, "alpha:2", max_tokens=2).status_code for _ in range(3)]
    assert codes.count(500) == 1 and not repo_faults.pending, codes
    status = _status(srv)["models"]["alpha"]
    assert status["weights"] == {} and "canary" not in status["labels"] and status["guard"] is None
    assert status["guard_verdict"].startswith("rolled back alpha:2: error_rate<0.01")
    assert 'trtserve_rollbacks_total{cause="guard",model="alpha"} 1.0' in httpx.get(f"{srv.url}/metrics").text


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_unload_under_load_loses_no_request_and_frees_memory(srv):
    body = {"model": "beta", "prompt": "x", "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    loaded = _rss(srv.proc.pid)

    async def main():
        async with httpx.AsyncClient(base_url=srv.url, timeout=120) as c:
            tasks = [asyncio.create_task(c.post("/v1/completions", json=body)) for _ in range(8)]
            await asyncio.sleep(0.3)  # they are running
            unload = await c.post("/admin/models/beta/unload", json={}, headers=AUTH)
            return unload, await asyncio.gather(*tasks)

    unload, rs = asyncio.run(main())
    assert unload.status_code == 200 and unload.json()["models"]["beta"]["versions"]["1"]["state"] == "UNAVAILABLE"
    assert [r.status_code for r in rs] == [200] * 8
    assert all(r.json()["usage"]["completion_tokens"] == 40 and r.json()["model"] == "beta:1" for r in rs)
    after = _complete(srv.url, "beta")
    assert after.status_code == 503 and after.headers["retry-after"] and "alpha" not in after.text
    freed = loaded - _rss(srv.proc.pid)
    assert freed > 15 << 20, (loaded, freed)  # beta's ~28 MB of weights went back to the system
    assert _complete(srv.url, "alpha").status_code == 200
    assert httpx.get(f"{srv.url}/v2/health/ready").status_code == 200  # alpha's default is still ready
    _admin(srv, "load", model="beta")
    assert _complete(srv.url, "beta").json()["model"] == "beta:1"


def test_kv_budget_refuses_then_reload_replaces_a_version_without_losing_requests(srv):
    # Four versions hold 16 MiB each of the 64 MiB: a second alpha:1 engine does not fit.
    full = httpx.post(f"{srv.url}/admin/models/alpha/load", json={"versions": [1], "reload": True}, headers=AUTH)
    message = full.json()["error"]["message"]
    assert full.status_code == 400 and "needs 16 MiB but only 0 MiB of the 64 MiB" in message
    assert "alpha:3 16 MiB" in message and _complete(srv.url, "alpha:1").status_code == 200  # nothing disturbed
    _admin(srv, "unload", versions=[3])
    body = {"model": "alpha:1", "prompt": "x", "max_tokens": 30, "temperature": 0, "ignore_eos": True}

    async def main():
        async with httpx.AsyncClient(base_url=srv.url, timeout=120) as c:
            tasks = [asyncio.create_task(c.post("/v1/completions", json=body)) for _ in range(6)]
            await asyncio.sleep(0.2)
            reload = await c.post("/admin/models/alpha/load", json={"versions": [1], "reload": True}, headers=AUTH)
            return reload, await asyncio.gather(*tasks)

    reload, rs = asyncio.run(main())
    assert reload.status_code == 200, reload.text
    assert [r.status_code for r in rs] == [200] * 6 and {r.json()["usage"]["completion_tokens"] for r in rs} == {30}
    assert _complete(srv.url, "alpha:1").json()["model"] == "alpha:1"
    assert _status(srv)["models"]["alpha"]["versions"]["1"]["served"] == 1  # a fresh engine answered it


def test_restart_restores_labels_and_weights(srv, repo, tmp_path):
    _admin(srv, "promote", version=2)
    _admin(srv, "canary", version=1, weight=10)
    before = _status(srv)["models"]["alpha"]
    policy = yaml.safe_load((repo / "alpha" / "policy.yaml").read_text())
    assert policy["labels"] == {"stable": 2, "canary": 1} and policy["weights"] == {1: 10.0, 2: 90.0}
    srv.stop()
    # explicit: nothing loads until asked, so the restored policy is read before any engine opens
    args = ("--kv-cache-memory", "64MiB", "--admin-key", ADMIN, "--model-control-mode", "explicit")
    again = Server(repo, *args, log=tmp_path / "restart.log")
    try:
        after = _status(again)["models"]["alpha"]
        assert (after["labels"], after["weights"]) == (before["labels"], before["weights"])
        assert {v["state"] for v in after["versions"].values()} == {"UNKNOWN"}
        assert _complete(again.url, "alpha").status_code == 503
        assert httpx.get(f"{again.url}/v2").json()["name"] == "trtserve"  # server metadata needs no model
        _admin(again, "load", versions=[2])
        assert _complete(again.url, "alpha@stable").json()["model"] == "alpha:2"
        r = httpx.post(f"{again.url}/admin/models/alpha/rollback", headers=AUTH)  # history survived too
        assert r.json()["models"]["alpha"]["labels"] == {"stable": 2}
    finally:
        again.stop()
