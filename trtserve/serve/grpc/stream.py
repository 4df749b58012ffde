"""ModelStreamInfer: the decoupled streaming path TensorRT-LLM's Triton backend uses.

One stream carries many requests. Each is read as it arrives and runs as its own task; responses
are interleaved on the stream, each carrying its request's `id` (echoed, never a key: repeats are
fine). With the `stream` input true, every token delta is one response; otherwise the request gets
one response with the whole output. Every response says `triton_final_response` (true on its
request's last); a client that sets `triton_enable_empty_final_response` gets every data response
with false and then an empty response with true, as Triton does for decoupled models.

A tensor model's request gets one response with its outputs (tensor models are not decoupled).
A request's error is one response with `error_message` (the stream stays open). Cancelling the
stream, or a client that goes away, cancels the tasks, which aborts their engine requests at once.
A half-closed stream (the client sent its last request) still finishes what it accepted.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb

from trtserve.serve.errors import APIError
from trtserve.serve.generation import GenerationRun
from trtserve.serve.group import collect_all
from trtserve.serve.grpc.calls import CallLog, admit, check_id, gone_code, metadata_of, status_of
from trtserve.serve.grpc.tensors import infer_response, infer_tensor, parameters, request_tensors
from trtserve.serve.kserve.infer import InferCall, infer_call
from trtserve.serve.kserve.serving import VERSION, KServeServing
from trtserve.serve.repository.kinds import FrontEnd, Tensors
from trtserve.serve.repository.lookup import refuse
from trtserve.serve.tensors.serving import TensorServing

EMPTY_FINAL = "triton_enable_empty_final_response"
_END = object()  # queued once every accepted request has answered, after the client half-closed


class StreamSession:
    def __init__(self, servicer, context):
        self.servicer, self.server, self.context = servicer, servicer.server, context
        self.out: asyncio.Queue = asyncio.Queue()  # responses, in the order they were produced
        self.tasks: set[asyncio.Task] = set()  # one per request still running
        self.metadata: dict[str, str] = {}  # the stream's: each request's span continues its traceparent

    async def run(self, requests: AsyncIterator[pb.ModelInferRequest]) -> AsyncIterator[pb.ModelStreamInferResponse]:
        metadata = self.metadata = metadata_of(self.context)
        try:
            admit(self.server, "ModelStreamInfer", metadata)
        except APIError as err:
            code, message = status_of(err)
            CallLog(self.server, "ModelStreamInfer", metadata.get("x-request-id") or uuid.uuid4().hex).finish(code)
            await self.context.abort(code, message)
        reader = asyncio.ensure_future(self._read(requests))
        try:
            while (item := await self.out.get()) is not _END:
                yield item
            await reader  # surfaces a failure to read the stream
        finally:  # cancelled (client gone, deadline) or done: nothing may keep running
            reader.cancel()
            for t in list(self.tasks):
                t.cancel()
            await asyncio.gather(reader, *self.tasks, return_exceptions=True)

    async def _read(self, requests) -> None:
        try:
            async for req in requests:
                task = asyncio.ensure_future(self._serve(req))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            await asyncio.gather(*self.tasks, return_exceptions=True)  # half-closed: finish what was accepted
        finally:
            self.out.put_nowait(_END)

    async def _serve(self, req: pb.ModelInferRequest) -> None:
        call = CallLog(self.server, "ModelStreamInfer", req.id or uuid.uuid4().hex, self.metadata)
        code = grpc.StatusCode.OK
        try:
            await self._infer(req, call)
        except asyncio.CancelledError:
            code = gone_code(self.context)
            raise
        except Exception as err:
            code, message = status_of(err)
            self.out.put_nowait(self._error(req, message))
        finally:
            call.finish(code)

    async def _infer(self, req: pb.ModelInferRequest, call: CallLog) -> None:
        if self.server.draining:
            raise APIError(503, "the server is shutting down; retry on another replica")
        mv = self.servicer.routed(req.model_name, req.model_version, call)
        req.model_version = str(mv.version)  # responses name the version that answered
        check_id(req.id)
        params = parameters(req.parameters)
        empty_final = params.get(EMPTY_FINAL, False)
        if not isinstance(empty_final, bool):
            raise APIError(400, f"parameter {EMPTY_FINAL!r} must be a bool_param")
        refuse(mv, FrontEnd.INFER)
        if mv.kind.tensors is Tensors.CONFIG:  # not decoupled: one response per request
            self._send(req, await infer_tensor(TensorServing.of(mv), req), final=not empty_final)
            if empty_final:
                self._send(req, {}, final=True)
            return
        serving = KServeServing(mv.service)
        ic = infer_call(request_tensors(req), params, [o.name for o in req.outputs] or None, serving.svc.model_name)
        if ic.inputs.stream and (len(ic.prompts) != 1 or ic.inputs.num_return_sequences != 1):
            raise APIError(
                400,
                "stream: true streams one sequence per request; send one text_input with num_return_sequences 1, "
                "or stream: false to get a batch in one response",
            )
        runs = await serving.start_infer(ic, call.rid, call.context, "grpc", self.context.time_remaining())
        if ic.inputs.stream:
            await self._stream(req, ic, runs[0], empty_final)
            return
        outs = await collect_all(runs)
        receipt = ",".join(r.receipt_id for r in runs)
        self._send(req, serving.infer_arrays(ic, outs), final=not empty_final, receipt=receipt)
        if empty_final:
            self._send(req, {}, final=True)

    async def _stream(self, req: pb.ModelInferRequest, ic: InferCall, run: GenerationRun, empty_final: bool) -> None:
        prefix = "" if ic.inputs.exclude_input_in_output else ic.prompts[0]
        shape = ic.output_shape  # text_input's: one prompt, one sequence
        cum, final_sent = 0.0, False
        try:
            async for d in run.deltas():
                piece, prefix = prefix + d.text, ""  # the prompt (when included) leads the first delta
                lps = [lp.logprob for lp in (d.logprobs or [])]
                cum += sum(lps)
                arrays = {
                    "text_output": np.array([piece.encode()], dtype=np.object_).reshape(shape),
                    "output_log_probs": np.array(lps, dtype=np.float32).reshape([*shape, len(lps)]),
                    "cum_log_probs": np.array([cum], dtype=np.float32).reshape(shape),
                }
                final_sent = d.finish_reason is not None and not empty_final
                receipt = run.receipt_id if d.finish_reason is not None else None
                self._send(req, {n: arrays[n] for n in ic.outputs}, final=final_sent, receipt=receipt)
        finally:
            run.ticket.release()  # idempotent: covers a run cancelled before it started
        if not final_sent:  # asked for, or the engine ended without a finish reason
            self._send(req, {}, final=True)

    def _send(
        self, req: pb.ModelInferRequest, arrays: dict[str, np.ndarray], final: bool, receipt: str | None = None
    ) -> None:
        resp = infer_response(req.model_name, req.model_version or VERSION, req.id, arrays)
        resp.parameters["triton_final_response"].bool_param = final
        if receipt is not None:  # on the response that ends the request's generation
            resp.parameters["receipt"].string_param = receipt
        self.out.put_nowait(pb.ModelStreamInferResponse(infer_response=resp))

    @staticmethod
    def _error(req: pb.ModelInferRequest, message: str) -> pb.ModelStreamInferResponse:
        resp = pb.ModelInferResponse(model_name=req.model_name, model_version=req.model_version, id=req.id)
        resp.parameters["triton_final_response"].bool_param = True
        return pb.ModelStreamInferResponse(error_message=message, infer_response=resp)
