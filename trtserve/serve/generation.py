"""The serving logic every front end shares: admission, deadlines, metrics, text output.

OpenAI, KServe and gRPC are adapters onto `GenerationService.start` and the run it returns
(serve/group.py runs a request's several prompts as one). Features observe it rather than being
built into it: `param_hooks` adjust the sampling params of every run (receipts draw a seed),
`observers` see every client run end (receipts, the repository's guard and shadow).
"""

from __future__ import annotations

import asyncio
import copy
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from trtserve.engine.adapters import AdapterRef
from trtserve.engine.errors import EngineAsleepError, EngineDeadError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.protocol import Engine
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.sampling import SamplingParams
from trtserve.engine.timeline import Timeline
from trtserve.serve.admission import Admission
from trtserve.serve.config import ServeConfig
from trtserve.serve.context import RequestContext
from trtserve.serve.errors import APIError
from trtserve.serve.telemetry.metrics import Metrics
from trtserve.serve.telemetry.statistics import InferStatistics
from trtserve.serve.telemetry.timings import RunTimings, request_metrics
from trtserve.serve.telemetry.tracing_record import RunRecord
from trtserve.text.outputs import OutputProcessor, RequestOutput, TextDelta


class GenerationService:
    def __init__(
        self, engine: Engine, tokenizer, model_name: str, config: ServeConfig, metrics: Metrics, version: str = "1"
    ):
        self.engine = engine
        self.tokenizer = tokenizer
        self.model_name = model_name  # what responses and latency metrics name: the adapter's, in an adapter's view
        self.base_model = model_name  # the repository model whose engine runs it
        self.adapter: AdapterRef | None = None  # the LoRA adapter every run of this view runs under (`under`)
        self.version = version  # the repository version this engine serves (metrics label, responses)
        # hook(params) -> the params the engine runs, for every run (receipts: a drawn seed)
        self.param_hooks: list[Callable[[SamplingParams], SamplingParams]] = []
        # observer(run, ok) when a client run ends (not warmups or shadows): receipts, guard, shadow
        self.observers: list[Callable[[GenerationRun, bool], None]] = []
        self.config = config
        self.metrics = metrics
        self.admission = Admission(config.max_queued_requests, config.max_queued_tokens)
        self.statistics = InferStatistics()  # every front end's requests, for gRPC ModelStatistics
        self.started = time.time()

    def under(self, adapter: AdapterRef) -> GenerationService:
        """This service with every run under LoRA `adapter`, answering as the adapter's name: a view
        that shares the engine, admission, hooks, observers and statistics."""
        view = copy.copy(self)
        view.adapter, view.model_name = adapter, adapter.name
        return view

    @property
    def max_seq_len(self) -> int:
        return self.engine.info.max_seq_len

    @staticmethod
    def new_id(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex}"

    def deadline(self, timeout: float | None) -> float | None:
        limits = [t for t in (timeout, self.config.request_timeout) if t is not None]
        return min(limits) if limits else None

    def start(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        options: RequestOptions,
        *,
        timeout: float | None = None,
        context: RequestContext | None = None,
        protocol: str = "http",
        internal: bool = False,
    ) -> GenerationRun:
        """Check and admit a request now (UserError -> 400, APIError 429/503), run it when iterated.
        `options`: the request's options as its front end parsed them (engine/request_options.py); a run
        without an adapter runs under this view's (`under`). `protocol` ("http" | "grpc") labels its
        latency metrics. `context` collects what the access log says of it. `internal`: the server's own
        run (warmup, shadow), which observers do not see."""
        admitting = time.monotonic()
        for hook in self.param_hooks:
            params = hook(params)
        if options.adapter is None and self.adapter is not None:
            options = replace(options, adapter=self.adapter)
        if context is not None and context.span.recording:  # the engine times its steps for the trace
            options = replace(options, trace=True)
        req = GenerateRequest(prompt_ids, params, options)
        self.engine.check(req)
        ticket = self.admission.enter(len(prompt_ids))
        run = GenerationRun(self, req, ticket, self.deadline(timeout), context, protocol, internal)
        run.admitting = admitting
        if context is not None:  # the middleware returns them in X-Trtserve-Receipt
            context.receipts.append(run.receipt_id)
        return run


class GenerationRun:
    """One admitted request: iterate `deltas()` to stream it, or `await collect()`."""

    def __init__(
        self,
        service: GenerationService,
        req: GenerateRequest,
        ticket,
        deadline: float | None,
        context: RequestContext | None,
        protocol: str = "http",
        internal: bool = False,
    ):
        self.service, self.req, self.ticket, self.deadline = service, req, ticket, deadline
        self.context, self.protocol, self.internal = context, protocol, internal
        self.proc = OutputProcessor(service.tokenizer, client_id_or(req), req.prompt_token_ids, req.params)
        self.ttft: float | None = None  # seconds to the first token, once it came
        self.queued: float | None = None  # seconds in the engine's queue, once scheduled
        self.e2e: float | None = None  # seconds from admission to the end, once it ended
        self.preemptions = 0  # times the engine preempted (and recomputed) it, as its deltas said
        self.receipt_id = f"rcpt-{uuid.uuid4().hex}"  # X-Trtserve-Receipt, whether or not receipts are stored
        self.created_at = time.time()
        self.admitting = self.admitted = time.monotonic()  # start() began / the run was admitted
        self.timings: RunTimings | None = None  # its clock readings, once it ended (serve/telemetry/timings.py)
        self.timelines: list[Timeline] = []  # its sequences' timed engine work, when traced (engine/timeline.py)
        self.chunks = 0  # text deltas handed to its consumer (a streamed request's chunks)
        self.detokenize_s = 0.0  # seconds in detokenization and stop strings, when traced
        self.write_s = 0.0  # seconds its consumer held each chunk (a stream's formatting and writes), when traced

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
        frontend = self.context.frontend if self.context is not None else "other"
        m, labels = svc.metrics, (svc.model_name, svc.version, self.protocol, frontend)
        itl = m.itl.labels(*labels)  # resolved once: it is observed for every token
        start = last = time.monotonic()
        first, ok, queued = True, False, None
        traced = req.options.trace  # the detokenize span's readings: no clock is read for an untraced run
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
                        if self.context is not None:
                            self.context.first_token(now - start)
                    elif d.token_ids:
                        itl.observe(now - last)
                    if d.queue_time is not None:
                        queued = d.queue_time
                        m.queue.labels(*labels).observe(d.queue_time)
                    last = now
                    self.preemptions = max(self.preemptions, d.num_preemptions)
                    if d.timeline is not None:
                        self.timelines.append(d.timeline)
                    began = time.monotonic() if traced else 0.0
                    td = self.proc.process(d)
                    if traced:
                        self.detokenize_s += time.monotonic() - began
                    if td is None:
                        continue
                    if self.proc.stopped_by_string(d.index) and d.finish_reason is None:
                        svc.engine.abort(req.request_id, d.index)
                    if td.error:
                        raise APIError(500, f"the engine failed while running this request ({td.error})")
                    if td.finish_reason:
                        m.finished.labels(*labels, td.finish_reason).inc()
                    self.chunks += 1
                    yielded = time.monotonic() if traced else 0.0
                    yield td
                    if traced:
                        self.write_s += time.monotonic() - yielded
            ok = True
        except TimeoutError:
            raise APIError(
                504, f"the request did not finish within its {self.deadline:g} s deadline and was aborted"
            ) from None
        except EngineDeadError as err:  # the watchdog (serve/watchdog.py) is about to exit the process
            raise APIError(503, f"{err}; this server is restarting, retry on another replica") from None
        except EngineAsleepError as err:  # put to sleep (POST /admin/sleep) after this request was admitted
            raise APIError(503, str(err), headers={"Retry-After": "5"}) from None
        finally:
            await gen.aclose()  # aborts the request in the engine if it is still running
            self.ticket.release()
            end = time.monotonic()
            m.e2e.labels(*labels).observe(end - start)
            svc.statistics.record(ok, end - start, queued)
            self.queued, self.e2e = queued, end - start
            first = None if self.ttft is None else start + self.ttft
            self.timings = RunTimings(self.admitting, self.admitted, start, queued, first, end)
            if req.options.return_metrics:
                self.output.metrics = request_metrics(self.timings, self.output)
            if not self.internal:
                for observe in svc.observers:
                    observe(self, ok)
            if self.context is not None:
                self._report(None if ok else sys.exc_info()[1])

    def _report(self, err: BaseException | None) -> None:
        """Tell the request's context (the access log) and its trace how this run went."""
        out = self.output
        done = sum(len(o.token_ids) for o in out.outputs)
        self.context.ended(len(out.prompt_token_ids), done, out.num_cached_tokens, self.queued)
        self.context.span.run_ended(lambda: self._record(done, err))

    def _record(self, done: int, err: BaseException | None) -> RunRecord:
        """What its trace records of it (built only when tracing is on)."""
        out, opts, svc = self.output, self.req.options, self.service
        return RunRecord(
            model=svc.model_name,
            version=svc.version,
            adapter=None if opts.adapter is None else opts.adapter.name,
            priority=opts.priority,
            receipt_id=self.receipt_id,
            params=self.req.params,
            timings=self.timings,
            prompt_tokens=len(out.prompt_token_ids),
            completion_tokens=done,
            cached_tokens=out.num_cached_tokens,
            preemptions=self.preemptions,
            finish_reasons=[o.finish_reason for o in out.outputs if o.finish_reason is not None],
            error=None if err is None else _why(err),
            protocol=self.protocol,
            timelines=tuple(self.timelines),
            chunks=self.chunks,
            detokenize_s=self.detokenize_s,
            write_s=self.write_s,
        )


def _why(err: BaseException) -> str:
    """A failed run's error.type: an APIError's message, or what stopped it."""
    if isinstance(err, GeneratorExit | asyncio.CancelledError):
        return "cancelled"  # the client left, or its consumer stopped reading
    return getattr(err, "message", None) or type(err).__name__


def client_id_or(req: GenerateRequest) -> str:
    return req.options.client_id if req.options.client_id is not None else str(req.request_id)
