"""KV hand-off (disaggregated prefill and decode, engine/kv_transfer.py) as an engine-core feature.

A KVHold request's prompt KV is held once it finishes (its last delta names it) until exported and
released, or until its hold time passes; a KVImport request's prompt KV is written into its blocks
before the step that first reads them, and its first token counts as already generated.
"""

from __future__ import annotations

from trtserve.engine.errors import UserError
from trtserve.engine.kv_transfer import KVHandle, KVHold, KVImport, KVPayload
from trtserve.models.kv_cache import PagedKVCache
from trtserve.runtime.block_manager import BlockManager
from trtserve.runtime.features import EngineFeature
from trtserve.runtime.kv_export import KVHolds, check_import, import_blocks
from trtserve.runtime.request import Request


def holds_kv(r: Request) -> bool:
    """r is a disaggregated prefill: its blocks outlive it (the scheduler does not free them)."""
    return isinstance(r.options.kv_transfer, KVHold)


class KVHandoff(EngineFeature):
    def __init__(self, fingerprint: str):
        self.fingerprint = fingerprint
        self.holds: KVHolds | None = None  # made with each KV cache (on_cache)
        self.kv: PagedKVCache | None = None

    def on_cache(self, blocks: BlockManager, kv: PagedKVCache) -> None:
        self.holds, self.kv = KVHolds(blocks), kv

    def on_release_cache(self, blocks: BlockManager) -> None:
        self._holds().release_all()
        self.holds = self.kv = None

    def check(self, req) -> None:
        transfer = req.options.kv_transfer
        if transfer is None:
            return
        if req.params.n != 1 or req.params.prompt_logprobs is not None:
            raise UserError("a disaggregated request (prefill or decode) takes n=1 and no prompt_logprobs")
        if isinstance(transfer, KVImport):
            check_import(self._kv(), transfer, len(req.prompt_token_ids), self.fingerprint)

    def on_add(self, r: Request) -> None:
        transfer = r.options.kv_transfer
        if isinstance(transfer, KVImport):  # the prefill's first token is this request's first output
            r.kv_import, r.output_token_ids = transfer, [transfer.first_token]

    def before_run(self, out, kv, blocks) -> None:
        for r in out.kv_imports:  # disaggregated decodes: their prompt's KV, before the step reads it
            if r.kv_import is not None:
                import_blocks(kv, blocks.block_table(r.seq), r.kv_import.payload)
                r.kv_import = None

    def on_finish(self, r: Request, delta) -> None:
        transfer = r.options.kv_transfer
        if isinstance(transfer, KVHold):  # a disaggregated prefill: its prompt's KV waits for export
            self._holds().hold(r.seq, r.num_prompt_tokens, transfer.hold_s)
            delta.kv_handle = KVHandle(r.seq.request, r.num_prompt_tokens, r.output_token_ids[0])

    def tick(self) -> None:
        if self.holds is not None:
            self.holds.expire()  # held prefills nobody pulled in time

    def export(self, handle: KVHandle) -> KVPayload:
        """A copy of the prompt KV a finished KVHold request holds (UserError once released or expired)."""
        return self._holds().export(self._kv(), handle, self.fingerprint)

    def release(self, handle: KVHandle) -> None:
        self._holds().release(handle.request_id)

    def _holds(self) -> KVHolds:
        if self.holds is None:
            raise UserError("the engine is asleep and holds no KV; wake it up first")
        return self.holds

    def _kv(self) -> PagedKVCache:
        if self.kv is None:
            raise UserError("the engine is asleep and holds no KV; wake it up first")
        return self.kv
