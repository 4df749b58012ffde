"""trtserve's engine as a Dynamo worker (dynamo.common.backend.LLMEngine): token ids in, token ids out.

Roles: aggregated (prefill and decode here); prefill (compute the prompt, hold its KV, return
`disaggregated_params` naming it: handoff.py); decode (pull that KV, go on from the prefill's first token;
if the pull fails, compute the prompt here). The engine's prefix-cache events go to Dynamo's KV router
(kv_publisher.py). Dynamo is imported only here and in the CLI.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from dynamo.common.backend import EngineConfig, LLMEngine, WorkerConfig
from dynamo.common.backend.engine import LlmRegistration
from dynamo.common.backend.health_check import build_health_check_payload, is_probe
from dynamo.common.backend.publisher import ComponentSnapshot, PushSource
from dynamo.common.constants import DisaggregationMode
from dynamo.llm.exceptions import InvalidArgument, Unknown

from trtserve.dynamo.handoff import PARAMS_KEY, HandoffClient, HandoffServer
from trtserve.dynamo.kv_publisher import KVEventBridge
from trtserve.dynamo.mapping import chunk_of, eos_ids, first_token_finishes, prompt_of, sampling_params, usage
from trtserve.dynamo.metrics import register_metrics
from trtserve.dynamo.settings import WorkerSettings
from trtserve.dynamo.tracing import NO_WORK_TRACING, open_work_tracing
from trtserve.dynamo.transport import TransferError, make_transport
from trtserve.dynamo.work_span import WorkSpan
from trtserve.engine.errors import UserError
from trtserve.engine.kv_transfer import KVHold, KVImport
from trtserve.engine.layout import read_engine_config
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.open import open_engine
from trtserve.engine.protocol import Engine
from trtserve.engine.request_options import RequestOptions

log = logging.getLogger(__name__)
MODES = {"aggregated": DisaggregationMode.AGGREGATED, "prefill": DisaggregationMode.PREFILL}
MODES["decode"] = DisaggregationMode.DECODE


def worker_config(s: WorkerSettings, model_dir: str) -> WorkerConfig:
    return WorkerConfig(
        namespace=s.namespace,
        component=s.component,
        endpoint="generate",
        model_name=model_dir,
        served_model_name=s.name,
        discovery_backend=s.discovery_backend,
        request_plane=s.request_plane,
        event_plane=s.event_plane,
        disaggregation_mode=MODES[s.role],
    )


class TrtserveWorker(LLMEngine):
    def __init__(self, settings: WorkerSettings, model_dir: str):
        self.settings, self.model_dir = settings, model_dir
        self.engine: Engine | None = None
        self.server: HandoffServer | None = None  # prefill role
        self.client: HandoffClient | None = None  # decode role
        self.local_prefills = 0  # decode requests whose KV could not be pulled (computed here instead)
        self.pulled_tokens, self.pull_seconds = 0, 0.0  # prompt tokens whose KV was pulled, and the time it took
        self._requests: dict[str, Any] = {}  # Dynamo context id -> our RequestId
        self._bridge: KVEventBridge | None = None
        self._unsubscribe = None
        self._snapshots = None
        self._background: set[asyncio.Task] = set()
        self.tracing = NO_WORK_TRACING  # tracing.py: on where OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set

    @classmethod
    async def from_args(cls, argv: list[str] | None = None):
        raise UserError("start a trtserve Dynamo worker with `trtserve dynamo ENGINE_DIR --role ...`")

    async def start(self, worker_id: int) -> EngineConfig:
        s = self.settings
        self._loop = asyncio.get_running_loop()
        self.tracing = open_work_tracing(f"trtserve-dynamo-{s.role}")
        self.engine = engine = await asyncio.to_thread(open_engine, s.engine_dir, s.run_config)
        if s.role != "aggregated" and not engine.info.capabilities.kv_transfer:
            raise UserError(
                f"the {engine.info.backend} engine cannot hand KV between workers; run --role aggregated, "
                "or run this engine dir under `python -m dynamo.trtllm` (trtserve dynamo --dry-run)"
            )
        if s.role == "prefill":
            self.server = HandoffServer(engine, make_transport(s.transport, s.transfer_pool_bytes))
            self.server.start()
        elif s.role == "decode":
            self.client = HandoffClient(make_transport(s.transport, s.transfer_pool_bytes))
        info, stats = engine.info, engine.stats()
        block = read_engine_config(s.engine_dir).build_config.plugin_config.tokens_per_block
        llm = LlmRegistration(
            context_length=info.max_seq_len,
            kv_cache_block_size=block,
            total_kv_blocks=stats.kv_cache.blocks_total,
            max_num_seqs=info.max_batch_size,
            max_num_batched_tokens=info.max_num_tokens,
        )
        return EngineConfig(model=self.model_dir, served_model_name=s.name, llm=llm)

    # ---- generation --------------------------------------------------------------------------
    async def generate(self, request: dict[str, Any], context):
        engine = self._engine()
        try:
            prompt = prompt_of(request)
            params = sampling_params(request, max(engine.info.max_seq_len - len(prompt), 1))
        except UserError as err:
            raise InvalidArgument(str(err)) from None
        span = self._work_span(prompt, params, context)
        try:
            async for chunk in self._generate(request, prompt, params, context, span):
                if span is not None:
                    span.token(len(chunk.get("token_ids") or ()))
                    span.finish_reason = chunk.get("finish_reason") or span.finish_reason
                yield chunk
        except Exception as err:
            if span is not None:
                span.error = str(err) or type(err).__name__
            raise
        finally:
            self.tracing.end(span)

    def _work_span(self, prompt: list[int], params, context) -> WorkSpan | None:
        """This request's span (tracing.py), continuing the trace context Dynamo passed; None when off."""
        if not self.tracing.enabled:
            return None
        role = self.settings.role
        attrs = {
            "gen_ai.operation.name": "text_completion",
            "gen_ai.request.model": self.settings.name,
            "gen_ai.request.max_tokens": params.max_tokens,
            "gen_ai.usage.input_tokens": len(prompt),
            "trtserve.dynamo.role": role,
            "trtserve.dynamo.request_id": context.id(),
        }
        name = f"{'generate' if role == 'aggregated' else role} {self.settings.name}"
        return self.tracing.span(name, context.trace_headers(), attrs)

    async def _generate(self, request, prompt, params, context, span: WorkSpan | None):
        handoff = ((request.get("prefill_result") or {}).get("disaggregated_params") or {}).get(PARAMS_KEY)
        if self.settings.role == "decode" and handoff is not None:
            async for chunk in self._decode(request, prompt, params, handoff, context, span):
                yield chunk
            return
        transfer = None
        if self.settings.role == "prefill" and not is_probe(request):  # the frontend sends max_tokens=1 already
            params, transfer = params.model_copy(update={"max_tokens": 1}), KVHold(self.settings.hold_s)
        async for chunk in self._stream(GenerateRequest(prompt, params, RequestOptions(kv_transfer=transfer)), context):
            yield chunk

    async def _decode(self, request, prompt, params, handoff: dict, context, span: WorkSpan | None = None):
        """Continue from the prefill worker's KV and first token; compute the prompt here if it cannot be pulled."""
        start = time.perf_counter()
        try:
            payload = await self.client.pull(handoff)  # type: ignore[union-attr]
            self.pull_seconds += time.perf_counter() - start
            self.pulled_tokens += payload.num_tokens
            if span is not None:
                span.attributes["trtserve.kv_pulled_tokens"] = payload.num_tokens
                span.attributes["trtserve.kv_pull_s"] = time.perf_counter() - start
        except (TransferError, OSError) as err:
            log.warning("prefill KV could not be pulled (%s); computing the prompt on this decode worker", err)
            self.local_prefills += 1
            if span is not None:
                span.attributes["trtserve.kv_pulled_tokens"] = 0
            async for chunk in self._stream(GenerateRequest(prompt, params), context):
                yield chunk
            return
        finally:
            self._spawn(self.client.release(handoff))  # type: ignore[union-attr] - the bytes are ours now (or lost)
        first = int(handoff["first_token"])
        finish = first_token_finishes(first, len(prompt), params, eos_ids(request), self._engine().info.max_seq_len)
        if finish is not None:
            yield {"token_ids": [first], "index": 0, "finish_reason": finish, "completion_usage": usage(len(prompt), 1)}
            return
        yield {"token_ids": [first], "index": 0}
        req = GenerateRequest(prompt, params, RequestOptions(kv_transfer=KVImport(payload, first)))
        async for chunk in self._stream(req, context, emitted=1):
            yield chunk

    async def _stream(self, req: GenerateRequest, context, emitted: int = 0):
        engine = self._engine()
        try:
            engine.check(req)
        except UserError as err:
            raise InvalidArgument(str(err)) from None
        self._requests[context.id()] = req.request_id
        counts = [emitted] * req.params.n
        try:
            async for d in engine.generate(req):
                if d.error is not None:
                    raise Unknown(d.error)
                counts[d.index] += len(d.token_ids)
                chunk = chunk_of(d, counts[d.index])
                if d.kv_handle is not None and self.server is not None:
                    chunk["disaggregated_params"] = {PARAMS_KEY: self.server.offer(d.kv_handle, self.settings.hold_s)}
                yield chunk
                if context.is_stopped():
                    return  # leaving the engine's iterator aborts the request and frees its blocks
        finally:
            self._requests.pop(context.id(), None)
            self._publish_snapshot()

    async def abort(self, context) -> None:
        rid = self._requests.get(context.id())
        if rid is not None and self.engine is not None:
            self.engine.abort(rid)

    def _engine(self) -> Engine:
        if self.engine is None:
            raise Unknown("the trtserve engine is not started")
        return self.engine

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ---- KV events, load and metrics ---------------------------------------------------------
    async def kv_event_sources(self):
        if self.engine is None or not self.engine.info.capabilities.kv_events:
            return []
        return [PushSource(on_ready=self._on_publisher, dp_rank=0)]

    def _on_publisher(self, publisher) -> None:
        self._bridge = KVEventBridge(self._loop, publisher)
        self._unsubscribe = self._engine().subscribe_kv_events(self._bridge.on_event)

    def component_metrics_dp_ranks(self) -> list[int]:
        return [0]

    def attach_snapshot_publisher(self, publisher) -> None:
        self._snapshots = publisher
        self._publish_snapshot()

    def _publish_snapshot(self) -> None:
        if self._snapshots is None or self.engine is None:
            return
        s = self.engine.stats()
        hit_rate = s.prefix_cache.hits / s.prefix_cache.queries if s.prefix_cache.queries else None
        snap = ComponentSnapshot(s.kv_cache.blocks_used, s.kv_cache.blocks_total, s.kv_cache.utilization, 0, hit_rate)
        self._snapshots.publish(0, snap)

    async def register_prometheus(self, metrics) -> None:
        register_metrics(metrics, self)

    async def health_check_payload(self):
        tokenizer = self._engine().tokenizer
        bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else 1
        return build_health_check_payload(bos_token_id=bos)

    async def is_quiescent(self) -> bool | None:
        if self.engine is None:
            return True
        s = self.engine.stats()
        return (
            s.scheduler.running == 0
            and s.scheduler.waiting == 0
            and (self.server is None or self.server.outstanding == 0)
        )

    async def cleanup(self) -> None:
        if self._bridge is not None:
            self._bridge.close()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.server is not None:
            await self.server.close()
            self.server.transport.close()
            self.server = None
        if self.client is not None:
            self.client.close()
            self.client.transport.close()
            self.client = None
        if self.engine is not None:
            engine, self.engine = self.engine, None
            await asyncio.to_thread(engine.shutdown)
        await asyncio.to_thread(self.tracing.shutdown)  # exports the spans still queued
