"""The per-request options every generating front end parses (engine/request_options.py).

A front end's request model inherits these fields and calls `request_options()` once; the value it
returns travels unchanged into the engine. A new per-request field is one field here, one in
RequestOptions, and the code that reads it.
"""

from __future__ import annotations

from dataclasses import fields

from pydantic import Field

from trtserve.engine.request_options import MAX_NAMESPACE_CHARS, RequestOptions
from trtserve.serve.json_body import JsonBody

_OPTION_NAMES = frozenset(f.name for f in fields(RequestOptions))


class RequestOptionFields(JsonBody):
    priority: float = Field(0.0, allow_inf_nan=False)  # higher is served first; trtserve extension
    cache_salt: str | None = None  # isolates prefix-cache entries; trtserve extension
    # trtserve extensions: a named context and its version; prefixes cached under another version are not reused
    cache_namespace: str | None = Field(None, min_length=1, max_length=MAX_NAMESPACE_CHARS)
    context_version: int | None = Field(None, ge=0, le=2**63 - 1)
    # trtserve extension: false opts out of speculative decoding (docs/speculative.md)
    speculate: bool = True
    # trtserve extension: true returns the request's timings in usage.metrics (docs/observability.md)
    return_metrics: bool = False

    def request_options(self, **given) -> RequestOptions:
        """The options this body asked for; `given`: what the front end knows besides the body (client_id,
        adapter) or decides over it (a protocol's own priority)."""
        asked = {name: getattr(self, name) for name in _OPTION_NAMES & type(self).model_fields.keys()}
        return RequestOptions(**(asked | given))
