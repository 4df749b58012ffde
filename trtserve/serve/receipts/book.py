"""The receipts hooks on every GenerationService run (receipts/install.py attaches them).

Every run gets a receipt id (returned in the X-Trtserve-Receipt header and a `receipt` field)
and a seed when the client gave none, so sampling can be replayed. With receipts on, the finished
run is handed to the recorder, which builds and commits the receipt in its own thread: the
response path only copies references into a tuple.
"""

from __future__ import annotations

import functools
import secrets
from typing import TYPE_CHECKING

import trtserve
from trtserve.engine.info import EngineInfo
from trtserve.engine.sampling import SamplingParams
from trtserve.serve.receipts.model import EngineIdentity, Receipt, SequenceRecord, token_sha256
from trtserve.serve.telemetry.timings import request_metrics

if TYPE_CHECKING:
    from trtserve.serve.generation import GenerationRun
    from trtserve.serve.receipts.recorder import ReceiptRecorder

SEED_BITS = 63  # fits every backend's seed range (TensorRT-LLM: unsigned 64-bit; torch: mod 2**64)


def engine_identity(info: EngineInfo) -> EngineIdentity:
    """What a loaded engine is, as it declares itself (Engine.info)."""
    return EngineIdentity(
        fingerprint=info.fingerprint,
        backend=info.backend,
        platform=info.platform,
        backend_version=info.backend_version,
        trtserve_version=trtserve.__version__,
        options=info.options.identity(),
    )


class ReceiptBook:
    """One per GenerationService. mode: "off" (ids only), "on", or "hashes"."""

    def __init__(self, identity: EngineIdentity, mode: str = "off"):
        self.identity = identity
        self.mode = mode

    @property
    def recording(self) -> bool:
        return self.mode != "off"

    def prepare(self, params: SamplingParams) -> SamplingParams:
        """The params the engine runs: a drawn seed when the client gave none; when recording, the
        sampled tokens' logprobs too (the replay report shows them; clients see only what they asked)."""
        update: dict = {}
        if params.seed is None:
            update["seed"] = secrets.randbits(SEED_BITS)
        if self.recording and params.logprobs is None:
            update["logprobs"] = 0
        return params.model_copy(update=update) if update else params

    def finish(self, run: GenerationRun, ok: bool, recorder: ReceiptRecorder) -> None:
        """Hand the finished run to the recorder (no copying, no hashing here: it is on the response path)."""
        if self.recording:
            recorder.record(run.receipt_id, functools.partial(self.build, run, ok))

    def build(self, run: GenerationRun, ok: bool) -> Receipt:
        """The receipt of a finished run (called in the recorder's thread)."""
        req, out, svc = run.req, run.output, run.service
        prompt = list(req.prompt_token_ids)
        outputs = [
            SequenceRecord(
                index=c.index,
                token_ids=list(c.token_ids),
                sha256=token_sha256(c.token_ids),
                logprobs=[lp.logprob for lp in c.logprobs] if c.logprobs is not None else None,
                finish_reason=c.finish_reason,
                stop_reason=c.stop_reason,
            )
            for c in out.outputs
        ]
        return Receipt(
            id=run.receipt_id,
            created_at=run.created_at,
            mode="hashes" if self.mode == "hashes" else "on",
            model=svc.base_model,
            model_version=_model_version(svc),
            engine=self.identity,
            adapter=None
            if req.options.adapter is None
            else {"name": req.options.adapter.name, "content_hash": req.options.adapter.content_hash},
            protocol=run.protocol,
            client_id=req.options.client_id,
            params=req.params.model_dump(mode="json"),
            prompt_token_ids=None if self.mode == "hashes" else prompt,
            prompt_sha256=token_sha256(prompt),
            num_prompt_tokens=len(prompt),
            images=[img.content_hash for img in req.options.images],
            outputs=outputs,
            cache={
                "namespace": req.options.cache_namespace,
                "context_version": req.options.context_version,
                "salted": req.options.cache_salt is not None,
                "cached_tokens": out.num_cached_tokens,
                "preemptions": run.preemptions,
            },
            timings={"queue_s": run.queued, "ttft_s": run.ttft, "e2e_s": run.e2e or 0.0},
            metrics=None if run.timings is None else request_metrics(run.timings, out),
            ok=ok,
            error=out.error,
        )


def _model_version(svc) -> str | None:
    """The model repository's version of the served model, when it has one."""
    v = getattr(svc, "version", None)
    return None if v is None else str(v)
