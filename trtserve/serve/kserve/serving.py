"""KServe v2 / Triton serving logic: an adapter onto the same GenerationService as OpenAI."""

from __future__ import annotations

import asyncio
import json

import numpy as np
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import Request as HTTPRequest

import trtserve
from trtserve.engine.errors import UserError
from trtserve.engine.vision import ImageInput
from trtserve.serve import speculative
from trtserve.serve.config import MAX_CLIENT_ID
from trtserve.serve.context import RequestContext
from trtserve.serve.errors import APIError
from trtserve.serve.generation import GenerationRun, GenerationService
from trtserve.serve.group import admit_all, collect_all
from trtserve.serve.images import ImageSource, load_images, prompt_with_images, vision_of
from trtserve.serve.kserve.infer import IMAGE_INPUTS, OPTIONAL_INPUTS, OUTPUTS, InferCall, infer_call
from trtserve.serve.kserve.protocol import HEADER, GenerateInputs, encode_bytes, generate_inputs, parse_infer, scalar
from trtserve.serve.sse import event
from trtserve.serve.telemetry.timings import metrics_field
from trtserve.text.outputs import RequestOutput

VERSION = "1"


class KServeServing:
    def __init__(self, service: GenerationService):
        self.svc = service
        self.tok = service.tokenizer
        self.platform = service.engine.info.platform  # what Triton's metadata calls the model's platform

    # ---- metadata ----------------------------------------------------------------------------
    @staticmethod
    def server_metadata() -> dict:
        """The same with or without a model loaded (a repository may have none ready)."""
        return {
            "name": "trtserve",
            "version": trtserve.__version__,
            "extensions": ["binary_tensor_data", "model_configuration", "generate", "statistics", "classification"],
        }

    def _optional_inputs(self) -> dict[str, str]:
        """The optional inputs and their datatypes: the ensemble's, and the image tensors where the model takes images."""
        images = dict.fromkeys(IMAGE_INPUTS, "BYTES") if vision_of(self.svc) is not None else {}
        return OPTIONAL_INPUTS | images

    def model_metadata(self) -> dict:
        inputs = [{"name": "text_input", "datatype": "BYTES", "shape": [-1]}]
        inputs += [{"name": k, "datatype": v, "shape": [-1]} for k, v in self._optional_inputs().items()]
        return {
            "name": self.svc.model_name,
            "versions": [self.svc.version],
            "platform": self.platform,
            "inputs": inputs,
            "outputs": [{"name": k, "datatype": v, "shape": [-1]} for k, v in OUTPUTS.items()],
        }

    def model_config(self) -> dict:
        def spec(name: str, dtype: str, optional: bool | None = None) -> dict:
            """A model_config.proto ModelInput (optional set) or ModelOutput (which has no such field)."""
            out = {"name": name, "data_type": "TYPE_STRING" if dtype == "BYTES" else f"TYPE_{dtype}", "dims": [-1]}
            return out if optional is None else {**out, "optional": optional}

        optional = [spec(k, v, True) for k, v in self._optional_inputs().items()]
        return {
            "name": self.svc.model_name,
            "platform": self.platform,
            "backend": "trtserve",
            "max_batch_size": 0,
            "input": [spec("text_input", "BYTES", False), *optional],
            "output": [spec(k, v) for k, v in OUTPUTS.items()],
            # As TensorRT-LLM's model says: gRPC ModelStreamInfer sends one response per token delta.
            "model_transaction_policy": {"decoupled": True},
            "parameters": {"max_seq_len": {"string_value": str(self.svc.max_seq_len)}},
        }

    # ---- requests -> runs ------------------------------------------------------------------------
    def _start(
        self,
        prompt: str,
        g: GenerateInputs,
        rid: str,
        context: RequestContext,
        priority: float | None = None,
        images: tuple[ImageInput, ...] = (),
        **kw,
    ) -> GenerationRun:
        """priority: the infer call's (default: g's); images: generate's image_input or the infer call's image
        tensor, one placeholder each in the prompt (docs/vision.md); kw: timeout (default: g's), protocol."""
        ids = prompt_with_images(self.svc, prompt, images)
        params = g.sampling_params([list(self.tok.encode(w, add_special_tokens=False)) for w in g.bad_words])
        given = {"client_id": rid, "images": images} | ({} if priority is None else {"priority": priority})
        return self.svc.start(ids, params, g.request_options(**given), context=context, **{"timeout": g.timeout} | kw)

    def _text(self, prompt: str, out: RequestOutput, g: GenerateInputs) -> list[str]:
        prefix = "" if g.exclude_input_in_output else prompt
        return [prefix + c.text for c in out.outputs]

    # ---- infer (HTTP here; gRPC in serve/grpc/ shares start_infer and infer_arrays) ---------------
    async def infer(self, body: bytes, headers, http: HTTPRequest, context: RequestContext) -> Response:
        req, tensors = parse_infer(body, headers.get(HEADER))
        wanted = [o.name for o in req.outputs] if req.outputs else None
        call = infer_call(tensors, req.parameters or {}, wanted, self.svc.model_name)
        rid = req.id if req.id is not None else self.svc.new_id("infer")
        runs = await self.start_infer(call, rid, context)
        outs = await collect_all(runs, http)
        arrays = self.infer_arrays(call, outs)
        binary = bool((req.parameters or {}).get("binary_data_output")) or any(
            (o.parameters or {}).get("binary_data") for o in (req.outputs or [])
        )
        head = {"model_name": self.svc.model_name, "model_version": self.svc.version, "id": rid, "outputs": []}
        head["parameters"] = {"receipt": ",".join(r.receipt_id for r in runs)}
        return self._respond(head, arrays, binary)

    async def start_infer(
        self,
        call: InferCall,
        rid: str,
        context: RequestContext,
        protocol: str = "http",
        deadline: float | None = None,
    ) -> list[GenerationRun]:
        """Decode the call's images off the event loop, then admit one run per prompt, all or none.
        `deadline` (seconds, e.g. gRPC's) caps the call's timeout."""
        images = await asyncio.gather(*(load_images(self.svc, sources) for sources in call.images))
        limits = [t for t in (call.timeout, deadline) if t is not None]
        kw = {"timeout": min(limits) if limits else None, "priority": call.priority, "protocol": protocol}

        def start(i: int) -> GenerationRun:
            given = images[i] if images else ()
            return self._start(call.prompts[i], call.inputs, f"{rid}-{i}", context, images=given, **kw)

        return admit_all(len(call.prompts), start)

    def infer_arrays(self, call: InferCall, outs: list[RequestOutput]) -> dict[str, np.ndarray]:
        """The requested outputs, in request order: text as UTF-8 bytes, log probs as float32."""
        g, shape = call.inputs, call.output_shape
        texts = [t for p, o in zip(call.prompts, outs, strict=True) for t in self._text(p, o, g)]
        lps = [[lp.logprob for lp in (c.logprobs or [])] for o in outs for c in o.outputs]
        width = max((len(x) for x in lps), default=0)
        padded = np.zeros((len(lps), width), dtype=np.float32)
        for i, row in enumerate(lps):
            padded[i, : len(row)] = row
        arrays = {
            "text_output": np.array([t.encode() for t in texts], dtype=np.object_).reshape(shape),
            "cum_log_probs": np.array([sum(x) for x in lps], dtype=np.float32).reshape(shape),
            "output_log_probs": padded.reshape([*shape, width]),
        }
        return {name: arrays[name] for name in call.outputs}

    def _respond(self, head: dict, arrays: dict[str, np.ndarray], binary: bool) -> Response:
        blobs = []
        for name, arr in arrays.items():
            entry = {"name": name, "datatype": OUTPUTS[name], "shape": list(arr.shape)}
            if binary:
                raw = encode_bytes(list(arr.reshape(-1))) if OUTPUTS[name] == "BYTES" else arr.astype("<f4").tobytes()
                entry["parameters"] = {"binary_data_size": len(raw)}
                blobs.append(raw)
            else:
                flat = arr.reshape(-1).tolist()
                entry["data"] = [v.decode("utf-8", "replace") for v in flat] if OUTPUTS[name] == "BYTES" else flat
            head["outputs"].append(entry)
        if not binary:
            return JSONResponse(head)
        header = json.dumps(head).encode()
        return Response(
            header + b"".join(blobs), media_type="application/octet-stream", headers={HEADER: str(len(header))}
        )

    # ---- generate ----------------------------------------------------------------------------------
    def _generate_args(self, body: dict) -> tuple[str, str | None, GenerateInputs]:
        if not isinstance(body, dict):
            raise APIError(400, "the generate body must be a JSON object")
        body = dict(body)
        body.pop("image_input", None)  # read by _image_sources
        text = body.pop("text_input", None)
        if isinstance(text, list) and len(text) == 1:
            text = text[0]
        if not isinstance(text, str) or not text:
            raise APIError(400, "text_input (a non-empty string) is required")
        params = body.pop("parameters", None) or {}
        if not isinstance(params, dict):
            raise APIError(400, "parameters must be a JSON object")
        client_id = body.pop("id", None)
        if client_id is not None and (not isinstance(client_id, str) or len(client_id) > MAX_CLIENT_ID):
            raise APIError(400, f"id must be a string of at most {MAX_CLIENT_ID} characters")
        # a top-level input wins over the same parameter, but a null one ([null] too) is not given: it keeps it
        given = {k: v for k, v in body.items() if k not in params or scalar(v) is not None}
        return text, client_id, generate_inputs({**params, **given})

    @staticmethod
    def _image_sources(body) -> list[ImageSource]:
        """generate's image_input: base64 images or data: URLs (one or a list), beside text_input."""
        given = body.get("image_input") if isinstance(body, dict) else None
        given = [given] if isinstance(given, str) else given or []
        if not isinstance(given, list) or not all(isinstance(x, str) for x in given):
            raise APIError(400, "image_input must be a base64 image or data: URL, or a list of them")
        return [
            ImageSource(url=x) if x.startswith(("data:", "http:", "https:")) else ImageSource(base64=x) for x in given
        ]

    async def generate(self, body: dict, http: HTTPRequest, context: RequestContext) -> JSONResponse:
        images = await load_images(self.svc, self._image_sources(body))
        text, client_id, g = self._generate_args(body)
        if g.stream:
            raise APIError(400, "stream: true needs the generate_stream endpoint")
        rid = client_id if client_id is not None else self.svc.new_id("gen")
        run = self._start(text, g, rid, context, images=images)
        (out,) = await collect_all([run], http)
        texts = self._text(text, out, g)
        resp = {
            "model_name": self.svc.model_name,
            "model_version": self.svc.version,
            **({"id": client_id} if client_id is not None else {}),
            "text_output": texts[0] if len(texts) == 1 else texts,
            "finish_reason": [c.finish_reason for c in out.outputs] if len(texts) > 1 else out.outputs[0].finish_reason,
            "receipt": run.receipt_id,
        }
        if g.return_log_probs:
            lps = [[lp.logprob for lp in (c.logprobs or [])] for c in out.outputs]
            resp["output_log_probs"] = lps[0] if len(lps) == 1 else lps
            resp["cum_log_probs"] = [sum(x) for x in lps] if len(lps) > 1 else sum(lps[0])
        if g.return_spec_decode_stats:
            resp["spec_decode"] = speculative.stats_field(c.spec for c in out.outputs)
        if (timings := metrics_field([out])) is not None:  # return_metrics
            resp["metrics"] = timings
        return JSONResponse(resp)

    async def generate_stream(self, body: dict, context: RequestContext) -> StreamingResponse:
        images = await load_images(self.svc, self._image_sources(body))
        text, client_id, g = self._generate_args(body)
        rid = client_id if client_id is not None else self.svc.new_id("gen")
        run = self._start(text, g, rid, context, images=images)
        prefix = "" if g.exclude_input_in_output else text

        async def events():
            sent_prefix = set()
            try:
                async for d in run.deltas():
                    piece = d.text
                    if d.index not in sent_prefix:
                        sent_prefix.add(d.index)
                        piece = prefix + piece
                    ev = {"model_name": self.svc.model_name, "model_version": self.svc.version, "text_output": piece}
                    if client_id is not None:
                        ev["id"] = client_id
                    if g.num_return_sequences > 1:
                        ev["sequence_index"] = d.index
                    if d.finish_reason:
                        ev["finish_reason"] = d.finish_reason
                        ev["receipt"] = run.receipt_id
                        if g.return_spec_decode_stats:  # this sequence's counts, on its last event
                            ev["spec_decode"] = speculative.stats_field([run.output.outputs[d.index].spec])
                    if g.return_log_probs and d.logprobs:
                        ev["output_log_probs"] = [lp.logprob for lp in d.logprobs]
                    yield event(ev)
                if (timings := metrics_field([run.output])) is not None:  # return_metrics, once the run ended
                    ev = {"model_name": self.svc.model_name, "model_version": self.svc.version, "text_output": ""}
                    yield event(ev | ({} if client_id is None else {"id": client_id}) | {"metrics": timings})
            except (APIError, UserError) as err:
                yield event({"error": str(err)})

        return StreamingResponse(
            events(), media_type="text/event-stream; charset=utf-8", headers={"Cache-Control": "no-cache"}
        )
