"""A Dynamo frontend and trtserve workers on loopback for the Dynamo lane (trtserve/dynamo/local.py).

Importing it skips the test module, with the reason, where Dynamo is not installed; a frontend that
cannot start here skips it too. Every HTTP call has a timeout; every process is stopped by its pid.
"""

import json
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip(
    "dynamo.frontend", reason="Dynamo is not installed (trtserve[dynamo]; scripts/setup.sh installs it)"
)

from trtserve.dynamo.local import loopback_env, start_frontend, start_worker, wait_model, wait_worker  # noqa: E402

MODEL = "tiny"
HTTP_TIMEOUT_S = 60


class Cluster:
    """A frontend and workers sharing one discovery directory; stop() ends each by its pid."""

    def __init__(self, tmp, engine_dir, router_mode="kv"):
        self.tmp, self.engine_dir = tmp, engine_dir
        self.env = loopback_env(tmp / "discovery", threads=1) | {"TMPDIR": str(tmp)}  # model dirs land here too
        self.procs = []
        try:
            self.frontend = self._keep(start_frontend(self.env, tmp / "frontend.log", router_mode))
            self.frontend.wait("/health", lambda body: True, timeout=60)
        except RuntimeError as err:
            self.stop()
            pytest.skip(f"the Dynamo frontend does not start here: {str(err)[:300]}")
        self.workers = {}

    def _keep(self, proc):
        self.procs.append(proc)
        return proc

    def add_worker(self, label, role, *args):
        worker = self._keep(start_worker(self.engine_dir, role, MODEL, self.env, self.tmp / f"{label}.log", *args))
        self.workers[label] = worker
        return worker

    def ready(self, routed=False):
        """Until every worker registered and the frontend lists the model; routed: and until a request is
        answered (a disaggregated frontend may list the model before it routes to the prefill worker, and
        answers 503 till then)."""
        for worker in self.workers.values():
            wait_worker(worker)
        wait_model(self.frontend, MODEL)
        deadline = time.monotonic() + 60
        while routed:
            try:
                self.complete([1, 2, 3], max_tokens=1)
                return
            except urllib.error.HTTPError as err:
                if err.code != 503 or time.monotonic() > deadline:
                    raise
            time.sleep(0.5)

    def stop(self):
        for proc in reversed(self.procs):
            proc.stop()

    def complete(self, prompt, max_tokens=8, nvext_extra=None):
        """/v1/completions on token ids, greedy; returns (completion token ids, nvext.worker_id)."""
        body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        body["nvext"] = {"extra_fields": ["completion_token_ids", "worker_id"], **(nvext_extra or {})}
        out = post(self.frontend.url + "/v1/completions", body)
        return out["nvext"]["completion_token_ids"], out["nvext"]["worker_id"]


def post(url, body, timeout=HTTP_TIMEOUT_S):
    """POST JSON; an HTTP error is raised with the server's message in it."""
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as err:
        err.msg = f"{err.msg}: {err.read()[:500].decode(errors='replace')}"
        raise


def reference_greedy(engine_dir, prompts, max_tokens):
    """The same engine dir in this process, no Dynamo: what every worker role must reproduce."""
    import asyncio

    from trtserve.backends.torch_engine import TorchEngine
    from trtserve.engine.messages import GenerateRequest
    from trtserve.engine.sampling import SamplingParams

    engine = TorchEngine(engine_dir)

    async def run(prompt):
        out = []
        async for d in engine.generate(GenerateRequest(prompt, SamplingParams(max_tokens=max_tokens, temperature=0))):
            out += d.token_ids
        return out

    try:
        return [asyncio.run(run(p)) for p in prompts]
    finally:
        engine.shutdown()
