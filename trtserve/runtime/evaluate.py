"""`trtserve eval`: perplexity of an engine on a text, and how closely it follows a reference engine.

Method (Hugging Face's "perplexity of fixed-length models", scored token by token):

- The text is tokenized once with the engine's tokenizer (its special tokens included, e.g. a
  leading BOS) into ids[0 .. N).
- Windows of at most `seq_len` tokens start at 0, stride, 2*stride, ... until one reaches N. Each
  window is run from an empty KV cache and scores only the tokens past the previous window's end,
  so no token is scored twice and each scored token has at least seq_len - stride tokens of
  context (except in the first window). A window's first token has no context inside it and is
  never scored: token 0, and with stride == seq_len (no overlap) every window's first token.
  With stride < seq_len every token 1 .. N-1 is scored exactly once. This is the token set and
  the loss Hugging Face transformers computes with labels = -100 before the previous window's end.
- perplexity = exp(mean over scored tokens of -log p(token | its window's preceding tokens)).
- Against a reference engine (same tokenizer), at every scored position: top-1 agreement (the
  share of positions whose argmax is equal), mean KL(reference || engine) in nats, and the
  perplexity delta 100 * (ppl - ref_ppl) / ref_ppl.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from trtserve.engine.errors import UserError
from trtserve.runtime import eval_data
from trtserve.runtime.loader import LoadedEngine, load_engine
from trtserve.runtime.scorer import WindowScorer

DEFAULT_SEQ_LEN = 512
_ROW_CHUNK = 128  # positions whose KL terms are materialized at once (rows * vocab float64)


@dataclass(frozen=True)
class Window:
    begin: int  # run tokens [begin, end)
    end: int
    first: int  # score tokens [first, end): each predicted from the logits one position before it

    @property
    def rows(self) -> range:
        """Offsets within the window of the logits that predict the scored tokens."""
        return range(self.first - 1 - self.begin, self.end - 1 - self.begin)


def windows(num_tokens: int, seq_len: int, stride: int) -> list[Window]:
    """Strided windows over num_tokens tokens; see the module docstring."""
    if not 1 <= stride <= seq_len or num_tokens < 2:
        raise ValueError(f"need 1 <= stride ({stride}) <= seq_len ({seq_len}) and at least 2 tokens")
    out, begin, prev_end = [], 0, 0
    while True:
        end = min(begin + seq_len, num_tokens)
        first = max(prev_end, begin + 1)  # a window's first token has no context in it
        if first < end:
            out.append(Window(begin, end, first))
        prev_end = end
        if end == num_tokens:
            return out
        begin += stride


@dataclass
class EvalResult:
    engine: str
    reference: str | None
    data: str  # file name, or "builtin" for the text shipped with trtserve
    tokens: int  # tokens in the (possibly truncated) text
    scored_tokens: int  # tokens whose probability was scored (tokens - 1)
    windows: int
    seq_len: int
    stride: int
    threads: int  # torch intra-op threads
    perplexity: float
    nll: float  # mean negative log-likelihood per scored token, nats
    tokens_per_second: float  # scored tokens / seconds in the engine's forward (incl. its log-softmax)
    reference_perplexity: float | None = None
    perplexity_delta_pct: float | None = None  # 100 * (perplexity - reference) / reference
    top1_agreement: float | None = None  # share of scored positions with the same argmax
    mean_kl: float | None = None  # mean over scored positions of KL(reference || engine), nats
    max_kl: float | None = None  # largest per-position KL(reference || engine), nats
    reference_tokens_per_second: float | None = None  # the same for the reference, measured in the same run

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Totals:
    nll: float = 0.0
    ref_nll: float = 0.0
    kl: float = 0.0
    max_kl: float = 0.0
    agree: int = 0
    count: int = 0
    seconds: float = 0.0  # in the engine's forward and log-softmax
    ref_seconds: float = 0.0  # the same for the reference


def evaluate(
    engine_dir: str | Path,
    reference_dir: str | Path | None = None,
    data: str | Path | None = None,
    max_tokens: int | None = None,
    seq_len: int | None = None,
    stride: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> EvalResult:
    """Score the engine (and the reference, if given) on `data` (default: the built-in text).

    progress(done, total) is called after each window.
    """
    text = eval_data.read_text(Path(data)) if data is not None else eval_data.default_text()
    engine = load_engine(engine_dir)
    ref = load_engine(reference_dir) if reference_dir is not None else None
    if ref is not None:
        check_same_vocab(engine, ref)
    seq_len, stride = _window_shape(engine, ref, seq_len, stride)
    ids = eval_data.tokenize(engine.tokenizer, text, max_tokens)
    wins = windows(len(ids), seq_len, stride)
    scorer = WindowScorer(engine, seq_len)
    ref_scorer = WindowScorer(ref, seq_len) if ref is not None else None
    t = _Totals()
    for i, w in enumerate(wins):
        _score_window(ids, w, scorer, ref_scorer, t)
        if progress is not None:
            progress(i + 1, len(wins))
    ppl = math.exp(t.nll / t.count)
    result = EvalResult(
        engine=str(engine_dir),
        reference=str(reference_dir) if reference_dir is not None else None,
        data=str(data) if data is not None else "builtin",
        tokens=len(ids),
        scored_tokens=t.count,
        windows=len(wins),
        seq_len=seq_len,
        stride=stride,
        threads=torch.get_num_threads(),
        perplexity=ppl,
        nll=t.nll / t.count,
        tokens_per_second=_rate(t.count, t.seconds),
    )
    if ref is not None:
        ref_ppl = math.exp(t.ref_nll / t.count)
        result.reference_perplexity = ref_ppl
        result.perplexity_delta_pct = 100.0 * (ppl - ref_ppl) / ref_ppl
        result.top1_agreement = t.agree / t.count
        result.mean_kl = t.kl / t.count
        result.max_kl = t.max_kl
        result.reference_tokens_per_second = _rate(t.count, t.ref_seconds)
    return result


def check_same_vocab(engine: LoadedEngine, ref: LoadedEngine) -> None:
    """Refuse a reference whose logits do not index the same tokens as the engine's."""
    a, b = engine.config.pretrained_config.vocab_size, ref.config.pretrained_config.vocab_size
    if a != b:
        raise UserError(
            f"the reference {ref.path} has a vocabulary of {b} tokens but {engine.path} has {a}; "
            "give a reference built from the same model"
        )
    if engine.tokenizer.get_vocab() != ref.tokenizer.get_vocab():
        raise UserError(
            f"the reference {ref.path} has a different tokenizer from {engine.path}; "
            "give a reference built from the same model"
        )


def _window_shape(engine: LoadedEngine, ref: LoadedEngine | None, seq_len: int | None, stride: int | None):
    limit = min(e.config.build_config.max_seq_len for e in (engine, ref) if e is not None)
    if seq_len is None:
        seq_len = min(DEFAULT_SEQ_LEN, limit)
    elif seq_len > limit:
        raise UserError(f"--seq-len {seq_len} exceeds the engine's max_seq_len ({limit}); give at most {limit}")
    if seq_len < 2:
        raise UserError(f"--seq-len must be at least 2, got {seq_len}")
    if stride is None:
        stride = max(1, seq_len // 2)
    elif not 1 <= stride <= seq_len:
        raise UserError(
            f"--stride {stride} must lie in [1, --seq-len {seq_len}]; a larger stride would leave tokens unscored"
        )
    return seq_len, stride


def _score_window(ids: list[int], w: Window, scorer: WindowScorer, ref_scorer: WindowScorer | None, t: _Totals) -> None:
    tokens, rows = ids[w.begin : w.end], list(w.rows)
    targets = torch.tensor(ids[w.first : w.end])  # (n,)
    start = time.perf_counter()
    logits = scorer.logits(tokens, rows)  # (n, vocab) float32
    logp = _log_softmax(logits)  # (n, vocab) float64
    t.nll -= float(logp.gather(1, targets[:, None]).sum())
    t.seconds += time.perf_counter() - start
    t.count += len(rows)
    if ref_scorer is None:
        return
    start = time.perf_counter()
    ref_logp = _log_softmax(ref_scorer.logits(tokens, rows))  # (n, vocab) float64
    t.ref_seconds += time.perf_counter() - start
    t.ref_nll -= float(ref_logp.gather(1, targets[:, None]).sum())
    for lo in range(0, len(rows), _ROW_CHUNK):
        p, q = ref_logp[lo : lo + _ROW_CHUNK], logp[lo : lo + _ROW_CHUNK]
        kl = F.kl_div(q, p, log_target=True, reduction="none").sum(-1)  # (chunk,) KL(ref || engine)
        t.kl += float(kl.sum())
        t.max_kl = max(t.max_kl, float(kl.max()))
        t.agree += int((p.argmax(-1) == q.argmax(-1)).sum())


def _rate(tokens: int, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else float("inf")


def _log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """float64 log-probabilities: KL between near-identical models is far below float32's resolution."""
    return F.log_softmax(logits.double(), dim=-1)
