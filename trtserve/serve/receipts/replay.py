"""Replaying a receipt: which engine may replay it, the request it describes, and the comparison.

Running the request is the caller's: `trtserve replay --engine` runs it offline, `--server` asks
`POST /v1/replay`. Both hand a `ReplayResult` to `compare`, which reports `identical` or the first
position where a sequence differs, with both tokens and their logprobs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from trtserve.engine.adapters import AdapterRef
from trtserve.engine.errors import UserError
from trtserve.engine.options import EngineOptions
from trtserve.engine.sampling import SamplingParams
from trtserve.serve.receipts.model import EngineIdentity, Receipt, token_sha256


class ReplaySequence(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int
    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str | None


def sequences_of(outputs) -> list[ReplaySequence]:
    """A replay's sequences from the text layer's CompletionOutputs (offline LLM or GenerationService)."""
    return [
        ReplaySequence(
            index=o.index,
            token_ids=o.token_ids,
            logprobs=[lp.logprob for lp in o.logprobs] if o.logprobs is not None else None,
            finish_reason=o.finish_reason,
        )
        for o in outputs
    ]


class ReplayResult(BaseModel):
    """What a replay produced."""

    model_config = ConfigDict(extra="forbid")
    engine: EngineIdentity
    outputs: list[ReplaySequence]
    cached_tokens: int  # prompt tokens the replay took from the prefix cache
    receipt: str | None = None  # the replay's own receipt id (a server replay is a generation too)


class Difference(BaseModel):
    sequence: int
    position: int  # output token index
    receipt_token: int | None  # None: that side had already ended
    replay_token: int | None
    receipt_logprob: float | None
    replay_logprob: float | None


class ReplayReport(BaseModel):
    receipt: str
    identical: bool
    difference: Difference | None
    engine: EngineIdentity  # what replayed it
    other_engine: bool  # the fingerprint differed and --allow-other-engine was given
    notes: list[str]

    def text(self) -> str:
        if self.identical:
            head = f"identical: {self.receipt} replays bit for bit ({self._tokens()} output tokens)"
        else:
            d = self.difference
            assert d is not None
            head = (
                f"differs: {self.receipt} sequence {d.sequence} position {d.position}: "
                f"receipt token {_tok(d.receipt_token)} (logprob {_lp(d.receipt_logprob)}), "
                f"replay token {_tok(d.replay_token)} (logprob {_lp(d.replay_logprob)})"
            )
        return "\n".join([head, *(f"note: {n}" for n in self.notes)])

    def _tokens(self) -> int:
        return self.difference.position if self.difference else self._count

    _count: int = 0


def _tok(t: int | None) -> str:
    return "<end>" if t is None else str(t)


def _lp(v: float | None) -> str:
    return "n/a" if v is None else repr(v)


def check_engine(receipt: Receipt, identity: EngineIdentity, allow_other_engine: bool) -> bool:
    """True when the replay runs on another engine (allowed); UserError when that is not allowed."""
    same = receipt.engine.fingerprint is not None and receipt.engine.fingerprint == identity.fingerprint
    if same:
        return False
    if not allow_other_engine:
        raise UserError(
            f"receipt {receipt.id} was computed by engine {_short(receipt.engine.fingerprint)}, but this engine is "
            f"{_short(identity.fingerprint)}; replay it on the same engine, or pass --allow-other-engine to compare anyway"
        )
    return True


def adapter_of(receipt: Receipt, served: list[AdapterRef]) -> AdapterRef | None:
    """The served adapter a replay runs under: the receipt's, by name and contents; UserError when
    this engine does not serve it with that hash (None: the receipt ran on the base model)."""
    want = receipt.adapter
    if want is None:
        return None
    ref = next((r for r in served if r.name == want.name), None)
    if ref is None or ref.content_hash != want.content_hash:
        now = "is not served" if ref is None else f"is served with other weights ({ref.content_hash[:19]})"
        raise UserError(
            f"receipt {receipt.id} ran under LoRA adapter {want.name} ({want.content_hash[:19]}), which {now} here; "
            "serve it under that name (POST /v1/load_lora_adapter, run --lora, or build --lora) and replay again"
        )
    return ref


def _short(fingerprint: str | None) -> str:
    return "(unknown)" if fingerprint is None else fingerprint[:16]


def prompt_of(receipt: Receipt, given: list[int] | None = None) -> list[int]:
    """The prompt's token ids: the receipt's, or (a `hashes` receipt) the ones given, checked by sha256.
    UserError for a prompt with images: a receipt holds their hashes only, and a replay needs the pixels."""
    if receipt.images:
        raise UserError(
            f"receipt {receipt.id} has {len(receipt.images)} image(s) in its prompt, which receipts record by content "
            "hash only, never the image itself; replay it by sending the request again with the same images "
            "(their hashes are the receipt's `images`)"
        )
    ids = given if given is not None else receipt.prompt_token_ids
    if ids is None:
        raise UserError(
            f"receipt {receipt.id} was stored with --receipts hashes and holds no prompt; "
            "give the prompt's token ids (--prompt-ids FILE with a JSON list)"
        )
    if token_sha256(ids) != receipt.prompt_sha256:
        raise UserError(
            f"the prompt given has sha256 {token_sha256(ids)[:16]}, receipt {receipt.id} says "
            f"{receipt.prompt_sha256[:16]}; give the exact prompt token ids the request was made with"
        )
    return list(ids)


def params_of(receipt: Receipt) -> SamplingParams:
    """The sampling parameters the original ran with, seed included."""
    return SamplingParams.model_validate(receipt.params)


def options_of(receipt: Receipt) -> EngineOptions:
    """The engine options the original ran with; UserError for one this trtserve does not know."""
    try:
        return EngineOptions.model_validate(receipt.engine.options)
    except ValidationError as err:
        raise UserError(
            f"receipt {receipt.id} ran with engine options {receipt.engine.options} that this trtserve cannot set "
            f"({err.errors()[0]['msg']}); replay it with the trtserve version that wrote it "
            f"({receipt.engine.trtserve_version})"
        ) from None


def compare(receipt: Receipt, result: ReplayResult, other_engine: bool) -> ReplayReport:
    replayed = {s.index: s for s in result.outputs}
    difference = None
    for orig in receipt.outputs:
        rep = replayed.get(orig.index)
        difference = _first_difference(orig.index, orig.token_ids, orig.logprobs, rep)
        if difference is not None:
            break
    report = ReplayReport(
        receipt=receipt.id,
        identical=difference is None,
        difference=difference,
        engine=result.engine,
        other_engine=other_engine,
        notes=_notes(receipt, result, other_engine),
    )
    report._count = sum(len(o.token_ids) for o in receipt.outputs)
    return report


def _first_difference(
    index: int, tokens: list[int], logprobs: list[float] | None, rep: ReplaySequence | None
) -> Difference | None:
    """Tokens must match, and logprobs too where both sides have them (bit for bit)."""
    rtokens = rep.token_ids if rep is not None else []
    rlps = rep.logprobs if rep is not None else None
    for pos in range(max(len(tokens), len(rtokens))):
        a = tokens[pos] if pos < len(tokens) else None
        b = rtokens[pos] if pos < len(rtokens) else None
        la = logprobs[pos] if logprobs is not None and pos < len(logprobs) else None
        lb = rlps[pos] if rlps is not None and pos < len(rlps) else None
        if a != b or (la is not None and lb is not None and la != lb):
            return Difference(
                sequence=index, position=pos, receipt_token=a, replay_token=b, receipt_logprob=la, replay_logprob=lb
            )
    return None


def _notes(receipt: Receipt, result: ReplayResult, other_engine: bool) -> list[str]:
    notes = []
    if other_engine:
        notes.append(
            f"replayed on another engine ({_short(result.engine.fingerprint)}, the receipt's is "
            f"{_short(receipt.engine.fingerprint)}) because --allow-other-engine was given"
        )
    if not (receipt.engine.deterministic and result.engine.deterministic):
        notes.append(
            "the engine is not deterministic: the batch and prefill chunks the original ran in (not recorded), "
            "prefix-cache hits and preemptions can change logprobs and tokens; serve with "
            "`engine: {deterministic: true}` for bitwise replays"
        )
    was, now = receipt.engine.options, result.engine.options
    for name in sorted(was.keys() | now.keys()):
        if _option(was, name) != _option(now, name):
            notes.append(
                f"engine option {name} differs: the original ran with {_option(was, name)}, the replay with "
                f"{_option(now, name)} (`engine: {{{name}: ...}}`); it changes logprobs and tokens"
            )
    if receipt.cache.preemptions:
        notes.append(f"the original was preempted {receipt.cache.preemptions} time(s) and its KV cache recomputed")
    if receipt.cache.cached_tokens != result.cached_tokens:
        notes.append(
            f"prefix cache differed: the original took {receipt.cache.cached_tokens} prompt tokens from the "
            f"cache, the replay {result.cached_tokens}"
        )
    if receipt.cache.namespace is not None:
        notes.append(
            f"the original was computed in cache namespace {receipt.cache.namespace!r}, "
            f"context version {receipt.cache.context_version}"
        )
    return notes


def _option(options: dict[str, Any], name: str) -> Any:
    """An option's value in an identity, which lists only those set away from their defaults."""
    field = EngineOptions.model_fields.get(name)
    return options.get(name, field.default if field is not None else None)
