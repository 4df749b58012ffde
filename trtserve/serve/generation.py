"""The serving logic every front end shares: admission, deadlines, metrics, text output.

OpenAI and KServe routes are adapters onto `GenerationService.stream` / `.collect`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

from starlette.requests import Request as HTTPRequest

from trtserve.engine.errors import EngineDeadError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.protocol import Engine
from trtserve.engine.sampling import SamplingParams
from trtserve.serve.admission import Admission
from trtserve.serve.config import ServeConfig
from trtserve.serve.errors import APIError
from trtserve.serve.metrics import Metrics
from trtserve.serve.receipts.book import ReceiptBook, engine_identity
from trtserve.serve.receipts.model import new_receipt_id
from trtserve.serve.statistics import InferStatistics
from trtserve.text.outputs import OutputProcessor, RequestOutput, TextDelta


class GenerationService:
    def __init__(
        self, engine: Engine, tokenizer, model_name: str, config: ServeConfig, metrics: Metrics, version: str = "1"
    ):
        self.engine = engine
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.version = version  # the repository version this engine serves (metrics label, responses)
        self.observers: list = []  # observer(run, ok) after every run: the repository's guard and shadow
        self.config = config
        self.metrics = metrics
        self.admission = Admission(config.max_queued_requests, config.max_queued_tokens)
        self.statistics = InferStatistics()  # every front end's requests, for gRPC ModelStatistics
        self.started = time.time()
        # receipt ids, drawn seeds; receipts themselves are recorded by serve/receipts/install.py
        self.receipts = ReceiptBook(engine_identity(engine, config.engine.deterministic), config.receipts)

    @property
    def max_seq_len(self) -> int:
        return self.engine.max_seq_len

    @staticmethod
    def new_id(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex}"

    def deadline(self, timeout: float | None) -> float | None:
        limits = [t for t in (timeout, self.config.request_timeout) if t is not None]
        return min(limits) if limits else None

    def start(
        self,
        client_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        *,
        timeout: float | None = None,
        priority: float = 0.0,
        cache_salt: str | None = None,
        log: dict | None = None,
        protocol: str = "http",
        cache_namespace: str | None = None,
        context_version: int | None = None,
    ) -> GenerationRun:
        """Check and admit a request now (UserError -> 400, APIError 429/503), run it when iterated.
        client_id is only logged and echoed: the engine names the request itself. `protocol`
        ("http" | "grpc") labels its latency metrics."""
        params = self.receipts.prepare(params)  # a drawn seed when none was given, so it can be replayed
        req = GenerateRequest(prompt_ids, params, priority, cache_salt, cache_namespace, context_version, client_id)
        self.engine.check(req)
        ticket = self.admission.enter(len(prompt_ids))
        run = GenerationRun(self, req, ticket, self.deadline(timeout), log, protocol)
        if log is not None:  # the middleware returns them in X-Trtserve-Receipt
            log.setdefault("receipts", []).append(run.receipt_id)
        return run


class GenerationRun:
    """One admitted request: iterate `deltas()` to stream it, or `await collect()`."""

    def __init__(
        self,
        service: GenerationService,
        req: GenerateRequest,
        ticket,
        deadline: float | None,
        log: dict | None,
        protocol: str = "http",
    ):
        self.service, self.req, self.ticket, self.deadline, self.log = service, req, ticket, deadline, log
        self.protocol = protocol
        self.proc = OutputProcessor(service.tokenizer, client_id_or(req), req.prompt_token_ids, req.params)
        self.ttft: float | None = None  # seconds to the first token, once it came
        self.queued: float | None = None  # seconds in the engine's queue, once scheduled
        self.e2e: float | None = None  # seconds from admission to the end, once it ended
        self.preemptions = 0  # times the engine preempted (and recomputed) it, as its deltas said
        self.receipt_id = new_receipt_id()
        self.created_at = time.time()

    @property
    def output(self) -> RequestOutput:
        return self.proc.output

    async def collect(self) -> RequestOutput:
        async for _ in self.deltas():
            pass
        return self.output

    async def deltas(self) -> AsyncIterator[TextDelta]:
        """Raises APIError 504 on the deadline and 500 if the engine failed the request."""
        svc, req = self.service, self.req
        m, labels = svc.metrics, (svc.model_name, svc.version, self.protocol)
        itl = m.itl.labels(*labels)  # resolved once: it is observed for every token
        start = last = time.monotonic()
        first, ok, queued = True, False, None
        gen = svc.engine.generate(req)
        try:
            async with asyncio.timeout(self.deadline):
                async for d in gen:
                    now = time.monotonic()
                    if first and d.token_ids:
                        first = False
                        self.ticket.started()
                        self.ttft = now - start
                        m.ttft.labels(*labels).observe(now - start)
                        if self.log is not None:
                            self.log.setdefault("ttft_ms", round((now - start) * 1000, 1))
                    elif d.token_ids:
                        itl.observe(now - last)
                    if d.queue_time is not None:
                        queued = d.queue_time
                        m.queue.labels(*labels).observe(d.queue_time)
                    last = now
                    self.preemptions = max(self.preemptions, d.num_preemptions)
                    td = self.proc.process(d)
                    if td is None:
                        continue
                    if self.proc.stopped_by_string(d.index) and d.finish_reason is None:
                        svc.engine.abort(req.request_id, d.index)
                    if td.error:
                        raise APIError(500, f"the engine failed while running this request ({td.error})")
                    if td.finish_reason:
                        m.finished.labels(*labels, td.finish_reason).inc()
                    yield td
            ok = True
        except TimeoutError:
            raise APIError(
                504, f"the request did not finish within its {self.deadline:g} s deadline and was aborted"
            ) from None
        except EngineDeadError as err:  # the watchdog (serve/watchdog.py) is about to exit the process
            raise APIError(503, f"{err}; this server is restarting, retry on another replica") from None
        finally:
            await gen.aclose()  # aborts the request in the engine if it is still running
            self.ticket.release()
            m.e2e.labels(*labels).observe(time.monotonic() - start)
            svc.statistics.record(ok, time.monotonic() - start, queued)
            self.queued, self.e2e = queued, time.monotonic() - start
            for observe in svc.observers:
                observe(self, ok)
            if self.log is not None:
                self.log["prompt_tokens"] = self.log.get("prompt_tokens", 0) + len(req.prompt_token_ids)
                done = sum(len(o.token_ids) for o in self.output.outputs)
                self.log["completion_tokens"] = self.log.get("completion_tokens", 0) + done


def client_id_or(req: GenerateRequest) -> str:
    return req.client_id if req.client_id is not None else str(req.request_id)


async def collect_all(runs: list[GenerationRun]) -> list[RequestOutput]:
    """Every run's output, in order. If one fails or the caller is cancelled, the others are
    aborted too, and every ticket is released (a run cancelled before it started holds one)."""
    tasks = [asyncio.ensure_future(r.collect()) for r in runs]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for r in runs:
            r.ticket.release()


async def until_disconnected(http: HTTPRequest) -> None:
    """Return when the client goes away (for non-streaming responses)."""
    while True:
        message = await http.receive()
        if message["type"] == "http.disconnect":
            return


async def run_or_abort_on_disconnect(http: HTTPRequest, coro):
    """Run `coro`; if the client disconnects first, cancel it (which aborts its engine requests)."""
    work = asyncio.ensure_future(coro)
    # A gather cancelled here ends with a CancelledError nobody awaits; take it, or asyncio logs an
    # ERROR with a traceback for every client that leaves (seen in the soak, scripts/soak.py).
    work.add_done_callback(lambda f: f.cancelled() or f.exception())
    watch = asyncio.ensure_future(until_disconnected(http))
    try:
        done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        if work in done:
            return work.result()
        work.cancel()
        raise APIError(499, "the client disconnected; the request was aborted")
    finally:
        watch.cancel()
        if not work.done():
            work.cancel()
