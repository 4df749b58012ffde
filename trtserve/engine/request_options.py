"""One request's options besides its prompt and sampling params: one typed value, end to end.

The front end that parsed a request builds it once (keyword arguments only) and it travels unchanged:
`GenerateRequest.options` -> the engine's `Request.options` (runtime/request.py) -> the code that uses
a field. Nothing in between copies its fields (tests/unit/test_request_options.py checks that), so a
new per-request field is this value, the front end that parses it and the code that reads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trtserve.engine.adapters import AdapterRef
from trtserve.engine.errors import UserError
from trtserve.engine.kv_transfer import KVTransfer
from trtserve.engine.pooling import PoolingTask
from trtserve.engine.thinking import ThinkingSpan
from trtserve.engine.vision import ImageInput

MAX_NAMESPACE_CHARS = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestOptions:
    priority: float = 0.0  # higher is served first
    cache_salt: str | None = None  # isolates this request's prefix-cache entries
    cache_namespace: str | None = None  # a named context whose cached prefixes can be invalidated together
    context_version: int | None = None  # that context's version: prefixes cached under another are not reused
    client_id: str | None = None  # what the client called it (logs and echoing only; never a key)
    adapter: AdapterRef | None = None  # the LoRA adapter it runs under (engine/adapters.py); None: the base model
    speculate: bool = True  # False: never speculate for this request (the `speculative` option's opt-out)
    # disaggregation (engine/kv_transfer.py): KVHold keeps a prefill's prompt KV; KVImport starts from one
    kv_transfer: KVTransfer | None = None
    return_metrics: bool = False  # True: the response carries its timings (serve's; engines ignore it)
    # True: the engine times its prefill chunks, verifications and grammar compile (engine/timeline.py) and
    # hands them over on each sequence's last delta; serve sets it while the request's trace records
    trace: bool = False
    # prefill only: the final delta's `pooled` holds the engine's pooled output for this task (engine/pooling.py)
    pooling: PoolingTask | None = None
    # the prompt's images in order (engine/vision.py), each at its run of the model's image token; () text only
    images: tuple[ImageInput, ...] = ()
    # a reasoning model's think tags and budget (engine/thinking.py): the engine closes the thinking at the
    # budget and starts a grammar after it; None: the reply is all answer
    thinking_span: ThinkingSpan | None = None

    def __post_init__(self):
        if not math.isfinite(self.priority):
            raise UserError(f"priority must be a finite number (got {self.priority})")
        if self.cache_namespace is not None and not 1 <= len(self.cache_namespace) <= MAX_NAMESPACE_CHARS:
            raise UserError(f"cache_namespace must have 1 to {MAX_NAMESPACE_CHARS} characters")
        if self.context_version is not None and not 0 <= self.context_version < 2**63:
            raise UserError("context_version must lie in [0, 2**63)")
