"""Incremental detokenization (never broken UTF-8), stop strings across tokens, and OutputProcessor.

Two tokenizers, both offline: the tiny byte-level BPE of tests/helpers.py and a byte-fallback
SentencePiece-style BPE built here with `tokenizers`; SmolLM2's is checked in tests/integration.
"""

from __future__ import annotations

import json

import pytest
from detokenizer_checks import FFFD, MULTIBYTE, TEXTS, check_all_prefixes, decode, stream
from helpers import write_tokenizer
from hypothesis import given, settings
from hypothesis import strategies as st

from trtserve.engine.ids import RequestId
from trtserve.engine.messages import TokenDelta
from trtserve.engine.sampling import SamplingParams
from trtserve.text.detokenizer import IncrementalDetokenizer, StopStringMatcher
from trtserve.text.outputs import OutputProcessor

# --- (a) the tiny byte-level BPE ----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_tok(tmp_path_factory):
    from transformers import PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("tiny-tok")
    write_tokenizer(d)
    return PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"))


def _prompts(tok) -> dict[str, list[int]]:
    return {
        "empty": [],
        "ascii": tok.encode("The quick brown fox", add_special_tokens=False),
        "cjk": tok.encode("Héllo 東京", add_special_tokens=False),
    }


@pytest.mark.parametrize("prompt_kind", ["empty", "ascii", "cjk"])
@pytest.mark.parametrize("text", TEXTS)
def test_tiny_byte_level_deltas_equal_full_decode(tiny_tok, text, prompt_kind):
    mid = check_all_prefixes(tiny_tok, text, _prompts(tiny_tok)[prompt_kind])
    if text in MULTIBYTE:
        assert mid > 0  # some token boundary falls inside a character: the hold-back path really ran


@pytest.mark.parametrize("chunk", [2, 3, 5])
@pytest.mark.parametrize("text", MULTIBYTE)
def test_tiny_byte_level_several_tokens_per_add(tiny_tok, text, chunk):
    check_all_prefixes(tiny_tok, text, _prompts(tiny_tok)["ascii"], chunk)


def test_tiny_tokens_do_split_characters(tiny_tok):
    # Single tokens that are not whole characters: "東" is three byte tokens here.
    ids = tiny_tok.encode("東", add_special_tokens=False)
    assert len(ids) > 1
    assert all(decode(tiny_tok, [i]) == FFFD for i in ids)


def test_tiny_holds_back_until_the_character_is_complete(tiny_tok):
    ids = tiny_tok.encode("a東", add_special_tokens=False)
    deltas, tail = stream(tiny_tok, [], ids)
    assert deltas[0] == "a"
    assert deltas[1:-1] == [""] * (len(ids) - 2)
    assert deltas[-1] == "東"
    assert tail == ""


def test_tiny_text_ending_mid_character(tiny_tok):
    ids = tiny_tok.encode("naïve 東", add_special_tokens=False)
    cut = ids[:-1]  # "東" is several byte tokens: dropping the last leaves half a character
    want = decode(tiny_tok, cut)
    assert want.endswith(FFFD) and want.startswith("naïve ")
    deltas, tail = stream(tiny_tok, [], cut)
    assert "".join(deltas) == "naïve "
    assert tail == want[len("naïve ") :]
    assert "".join(deltas) + tail == want


def test_special_tokens_are_skipped(tiny_tok):
    ids = tiny_tok.encode("naïve café", add_special_tokens=False)
    eos, bos = tiny_tok.convert_tokens_to_ids("</s>"), tiny_tok.convert_tokens_to_ids("<s>")
    out = [bos, *ids[:3], eos, *ids[3:], eos]
    deltas, tail = stream(tiny_tok, [bos], out)
    assert "".join(deltas) + tail == "naïve café" == decode(tiny_tok, out)
    det = IncrementalDetokenizer(tiny_tok, [], skip_special_tokens=False)
    text = "".join(det.add([i]) for i in out) + det.flush()
    assert text == tiny_tok.decode(out, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert "</s>" in text and "<s>" in text


def test_flush_twice_returns_nothing(tiny_tok):
    ids = tiny_tok.encode("東京と", add_special_tokens=False)[:-1]  # ends inside "と"
    det = IncrementalDetokenizer(tiny_tok, [])
    assert "".join(det.add([i]) for i in ids) == "東京"
    assert det.flush() == FFFD
    assert det.flush() == ""


# --- (2) property: random text through the tiny tokenizer ---------------------------------------

WIDE = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=("Cs",))
PIECES = st.sampled_from(["東京", "👩\u200d👧", "🇫🇷", "e\u0301", "é", " ", "a", "ö", "\U0001f642", "the "])


@settings(max_examples=100, deadline=None)
@given(
    text=st.one_of(st.text(WIDE, max_size=24), st.lists(PIECES, max_size=10).map("".join)),
    prompt_kind=st.sampled_from(["empty", "ascii", "cjk"]),
    chunk=st.integers(1, 4),
)
def test_random_text_deltas_equal_full_decode(tiny_tok, text, prompt_kind, chunk):
    ids = tiny_tok.encode(text, add_special_tokens=False)
    deltas, tail = stream(tiny_tok, _prompts(tiny_tok)[prompt_kind], ids, chunk)
    want = decode(tiny_tok, ids)
    assert "".join(deltas) + tail == want
    if FFFD not in want:
        assert not any(FFFD in d for d in deltas)
        assert tail == ""  # complete text is emitted by add() already


# --- (b) a byte-fallback SentencePiece-style tokenizer ------------------------------------------

SP_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, this is a tiny ASCII corpus for a byte fallback tokenizer.",
    "Stop strings and streaming text, one token at a time.",
] * 20


@pytest.fixture(scope="module")
def sp_tok():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # Learn merges on ASCII only, then put them in a byte-fallback BPE whose vocab holds <0x00>..<0xFF>
    # as ordinary (non-special) tokens, like Llama 2's and Mistral's tokenizers.
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.pre_tokenizer = pre_tokenizers.Metaspace()
    base.train_from_iterator(SP_CORPUS, trainers.BpeTrainer(vocab_size=150, special_tokens=["<unk>", "<s>", "</s>"]))
    learned = json.loads(base.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"<0x{b:02X}>": 3 + b for b in range(256)}
    for piece, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def _continuation(tok, prompt: list[int], out: list[int]) -> str:
    """The output's text as a continuation of the prompt (keeps the first token's leading space)."""
    before, after = decode(tok, prompt), decode(tok, prompt + out)
    assert after.startswith(before)
    return after[len(before) :]


def test_sp_tokenizer_really_falls_back_to_bytes(sp_tok):
    toks = sp_tok.convert_ids_to_tokens(sp_tok.encode("東京と北京", add_special_tokens=False))
    assert toks == ["▁"] + [f"<0x{b:02X}>" for b in "東京と北京".encode()]
    assert sp_tok.convert_ids_to_tokens(sp_tok.encode("naïve", add_special_tokens=False)) == [
        "▁",
        "n",
        "a",
        "<0xC3>",
        "<0xAF>",
        "v",
        "e",
    ]
    assert decode(sp_tok, sp_tok.encode("東京と北京 🇫🇷 naïve", add_special_tokens=False)) == "東京と北京 🇫🇷 naïve"


@pytest.mark.parametrize("prompt_text", ["", "The quick brown fox"])
@pytest.mark.parametrize("text", TEXTS)
def test_sp_byte_fallback_deltas_equal_full_decode(sp_tok, text, prompt_text):
    prompt = sp_tok.encode(prompt_text, add_special_tokens=False) if prompt_text else []
    ids = sp_tok.encode(text, add_special_tokens=False)
    complete = [k for k in range(len(ids) + 1) if FFFD not in decode(sp_tok, ids[:k])]
    for k in range(1, len(ids) + 1):
        deltas, tail = stream(sp_tok, prompt, ids[:k])
        assert not any(FFFD in d for d in deltas), (k, deltas)
        if k in complete:
            # With a prompt the first "▁" is a real space; alone, the Strip decoder drops it.
            want = _continuation(sp_tok, prompt, ids[:k]) if prompt else decode(sp_tok, ids[:k])
            assert "".join(deltas) + tail == want, (k, deltas, tail)
        else:
            # Mid-character: what was streamed is exactly the longest complete prefix.
            j = max(c for c in complete if c < k)
            want = _continuation(sp_tok, prompt, ids[:j]) if prompt else decode(sp_tok, ids[:j])
            assert "".join(deltas) == want, (k, deltas)


def test_sp_text_ending_mid_character_after_plain_tokens(sp_tok):
    ids = sp_tok.encode("naïve café", add_special_tokens=False)[:-1]  # ends with <0xC3>
    assert sp_tok.convert_ids_to_tokens(ids[-2:]) == ["f", "<0xC3>"]
    deltas, tail = stream(sp_tok, [], ids)
    assert "".join(deltas) == "naïve caf"
    assert tail == FFFD
    assert "".join(deltas) + tail == decode(sp_tok, ids) == "naïve caf" + FFFD


def test_sp_cjk_prompt_tail_cut_inside_byte_run(sp_tok):
    prompt = sp_tok.encode("東京", add_special_tokens=False)  # ▁ + 6 byte tokens; the last 4 start mid-"東"
    out = sp_tok.encode("北 ok", add_special_tokens=False)[1:]  # <0xE5> <0x8C> <0x97> ▁ok ...
    assert _continuation(sp_tok, prompt, out) == "北 ok"
    deltas, tail = stream(sp_tok, prompt, out)
    assert not any(FFFD in d for d in deltas), deltas  # actual: a delta "\ufffd\ufffd\ufffd ..."
    assert "".join(deltas) + tail == "北 ok"


def test_sp_flush_releases_incomplete_char_after_byte_run(sp_tok):
    ids = sp_tok.encode("東京と北京", add_special_tokens=False)[:-1]  # ends with <0xE4> <0xBA>
    deltas, tail = stream(sp_tok, [], ids)
    assert "".join(deltas) == "東京と北"
    # The docstring promises the held-back incomplete character; actual: "" (it silently vanishes).
    # (The full decode is no reference here: ByteFallback turns the whole 14-byte run into U+FFFD.)
    assert tail.startswith(FFFD)


# --- (3) StopStringMatcher -----------------------------------------------------------------------


def test_stop_split_across_feeds():
    m = StopStringMatcher(["STOP"])
    assert m.feed("abc ST") == "abc "
    assert m.held == "ST"
    assert m.feed("O") == ""
    assert m.matched is None
    assert m.feed("P and more") == ""
    assert m.matched == "STOP"
    assert m.feed("anything") == ""
    assert m.flush() == ""


def test_stop_split_across_feeds_included():
    m = StopStringMatcher(["STOP"], include_stop=True)
    assert [m.feed(t) for t in ["abc S", "T", "O", "P tail"]] == ["abc ", "", "", "STOP"]
    assert m.matched == "STOP"
    assert m.feed("more") == ""
    assert m.flush() == ""


def test_held_text_released_when_partial_match_fails():
    m = StopStringMatcher(["###"])
    assert m.feed("ab#") == "ab"
    assert m.held == "#"
    assert m.feed("#c") == "##c"
    assert m.held == ""
    assert m.matched is None
    assert m.feed("##") == ""
    assert m.feed("x#") == "##x"
    assert m.flush() == "#"
    assert m.matched is None


def test_overlapping_partial_match_keeps_the_right_suffix():
    m = StopStringMatcher(["aab"])
    assert m.feed("aa") == ""
    assert m.feed("a") == "a"  # "aaa": the last two can still start "aab"
    assert m.held == "aa"
    assert m.feed("b!") == ""
    assert m.matched == "aab"


def test_stop_excluded_by_default_and_included_on_request():
    assert StopStringMatcher(["</end>"]).feed("result: 42</end> junk") == "result: 42"
    assert StopStringMatcher(["</end>"], include_stop=True).feed("result: 42</end> junk") == "result: 42</end>"


def test_earliest_match_wins_whatever_the_list_order():
    for stops in (["world", "lo"], ["lo", "world"]):
        m = StopStringMatcher(stops)
        assert m.feed("hello world") == "hel"
        assert m.matched == "lo"
    m = StopStringMatcher(["BB", "AA"], include_stop=True)
    assert m.feed("xAAyBB") == "xAA"
    assert m.matched == "AA"


def test_earliest_match_wins_with_held_text():
    m = StopStringMatcher(["xyz", "bc"])
    assert m.feed("ab") == "a"  # "b" may start "bc"
    assert m.feed("cxyz") == ""  # "bc" at 0 beats "xyz" at 2
    assert m.matched == "bc"


def test_nothing_emitted_after_a_match():
    m = StopStringMatcher(["\n\n"])
    assert m.feed("line one\n") == "line one"
    assert m.feed("\nline two") == ""
    assert m.matched == "\n\n"
    assert [m.feed(t) for t in ["more", "\n\n", ""]] == ["", "", ""]
    assert m.flush() == ""


def test_flush_releases_held_text_without_a_match():
    m = StopStringMatcher(["###", "STOP"])
    assert m.feed("ab##") == "ab"
    assert m.flush() == "##"
    assert m.flush() == ""
    m = StopStringMatcher(["STOP"])
    assert m.feed("xSTO") == "x"
    assert m.flush() == "STO"
    assert m.matched is None


def test_no_stop_strings_passes_text_through():
    m = StopStringMatcher([])
    assert m.feed("###") == "###"
    assert m.flush() == ""


def test_multibyte_stop_string():
    m = StopStringMatcher(["北京"])
    assert m.feed("東京と北") == "東京と"
    assert m.feed("京 and more") == ""
    assert m.matched == "北京"


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(st.sampled_from("ab#x"), max_size=30),
    stops=st.lists(st.text(st.sampled_from("ab#"), min_size=1, max_size=4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 30), max_size=6),
    include=st.booleans(),
)
def test_stop_matcher_property(text, stops, cuts, include):
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    chunks = [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    m = StopStringMatcher(stops, include)
    out, seen = "", ""
    for c in chunks:
        seen += c
        out += m.feed(c)
        if m.matched is not None:
            break
    if m.matched is None:
        out += m.flush()
        assert out == text
        assert not any(s in text for s in stops)
    else:
        # The earliest-starting stop in the text seen so far (nothing was matched before this feed).
        pos = min(seen.find(s) for s in stops if s in seen)
        assert seen[pos:].startswith(m.matched)
        assert out == seen[: pos + (len(m.matched) if include else 0)]
        assert m.flush() == "" and m.feed("ab#") == ""


# --- (4) OutputProcessor end to end ---------------------------------------------------------------


def _deltas(ids, chunk=1, finish_reason=None, index=0, stop_reason=None):
    parts = [ids[i : i + chunk] for i in range(0, len(ids), chunk)]
    return [
        TokenDelta(
            R1,
            index,
            list(p),
            finish_reason=finish_reason if i == len(parts) - 1 else None,
            stop_reason=stop_reason if i == len(parts) - 1 else None,
        )
        for i, p in enumerate(parts)
    ]


R1 = RequestId.new()
PROC_TEXT = "Héllo wörld, naïve café; 東京 and 北京 are cities. 🙂"


@pytest.mark.parametrize(
    ("stop", "include", "want"),
    [
        ("naïve café", False, "Héllo wörld, "),
        ("naïve café", True, "Héllo wörld, naïve café"),
        ("京 and 北", False, "Héllo wörld, naïve café; 東"),
        ("cities.", True, "Héllo wörld, naïve café; 東京 and 北京 are cities."),
    ],
)
@pytest.mark.parametrize("chunk", [1, 3])
def test_output_processor_cuts_at_stop_string(tiny_tok, stop, include, want, chunk):
    prompt = tiny_tok.encode("The quick brown fox", add_special_tokens=False)
    ids = tiny_tok.encode(PROC_TEXT, add_special_tokens=False)
    first, last = PROC_TEXT.index(stop), PROC_TEXT.index(stop) + len(stop)
    # The stop string spans several tokens (so the match really happens across deltas).
    spans = [k for k in range(1, len(ids)) if first < len(decode(tiny_tok, ids[:k])) < last]
    assert spans
    params = SamplingParams(stop=[stop], include_stop_str_in_output=include, max_tokens=len(ids))
    proc = OutputProcessor(tiny_tok, "r1", prompt, params)
    texts, results = [], []
    for d in _deltas(ids, chunk, finish_reason="length"):
        r = proc.process(d)
        results.append(r)
        if r is not None:
            texts.append(r.text)
    done = [i for i, r in enumerate(results) if r is not None and r.finish_reason is not None]
    assert len(done) == 1
    stop_at = done[0]
    assert results[stop_at].finish_reason == "stop" and results[stop_at].stop_reason == stop
    assert all(r is None for r in results[stop_at + 1 :])
    # It stops at the delta carrying the token that completes the stop string. With several tokens per delta,
    # a delta that ends inside a character is held back whole (". " waits for the rest of "🙂"): one delta later.
    k = next(k for k in range(1, len(ids) + 1) if decode(tiny_tok, ids[:k]).startswith(PROC_TEXT[:last]))
    assert stop_at == (k - 1) // chunk if chunk == 1 else stop_at in ((k - 1) // chunk, (k - 1) // chunk + 1)
    out = proc.output.outputs[0]
    assert out.text == "".join(texts) == proc.output.text == want
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert proc.output.finished
    assert proc.stopped_by_string(0)
    assert out.token_ids == ids[: (stop_at + 1) * chunk]
    assert proc.process(TokenDelta(R1, 0, ids[:1], finish_reason="length")) is None
    assert out.text == want


@pytest.mark.parametrize("chunk", [1, 4])
@pytest.mark.parametrize("stops", [[], ["🙂!"], ["never", "E"]])
def test_output_processor_length_without_stop(tiny_tok, chunk, stops):
    ids = tiny_tok.encode(PROC_TEXT, add_special_tokens=False)
    proc = OutputProcessor(tiny_tok, "r1", [], SamplingParams(stop=stops, max_tokens=len(ids)))
    results = [proc.process(d) for d in _deltas(ids, chunk, finish_reason="length")]
    assert all(r is not None for r in results)
    assert [r.finish_reason for r in results] == [None] * (len(results) - 1) + ["length"]
    out = proc.output.outputs[0]
    assert out.text == "".join(r.text for r in results) == decode(tiny_tok, ids) == PROC_TEXT
    assert out.finish_reason == "length" and out.stop_reason is None
    assert out.token_ids == ids
    assert not proc.stopped_by_string(0)


def test_output_processor_releases_held_text_at_finish(tiny_tok):
    # The text ends with "🙂", which starts the stop "🙂!": held back until the sequence finishes.
    ids = tiny_tok.encode(PROC_TEXT, add_special_tokens=False)
    proc = OutputProcessor(tiny_tok, "r1", [], SamplingParams(stop=["🙂!"]))
    results = [proc.process(d) for d in _deltas(ids)]
    assert "".join(r.text for r in results) == PROC_TEXT[:-1]
    assert proc.output.finish_reason is None
    last = proc.process(TokenDelta(R1, 0, [], finish_reason="length"))
    assert last.text == "🙂" and last.finish_reason == "length"
    assert proc.output.text == PROC_TEXT


def test_output_processor_length_mid_character(tiny_tok):
    ids = tiny_tok.encode("naïve 東", add_special_tokens=False)[:-1]
    proc = OutputProcessor(tiny_tok, "r1", [], SamplingParams())
    results = [proc.process(d) for d in _deltas(ids, finish_reason="length")]
    assert not any(FFFD in r.text for r in results[:-1])
    assert proc.output.text == decode(tiny_tok, ids)
    assert proc.output.text.endswith(FFFD)


def test_output_processor_stop_token_keeps_its_reason(tiny_tok):
    ids = tiny_tok.encode("naïve café", add_special_tokens=False)
    eos = tiny_tok.convert_tokens_to_ids("</s>")
    proc = OutputProcessor(tiny_tok, "r1", [], SamplingParams(stop=["zzz"]))
    results = [proc.process(d) for d in _deltas([*ids, eos], 2, finish_reason="stop", stop_reason=eos)]
    assert results[-1].finish_reason == "stop" and results[-1].stop_reason == eos
    assert proc.output.text == "naïve café"
    assert proc.output.outputs[0].stop_reason == eos
    assert not proc.stopped_by_string(0)


def test_output_processor_sequences_are_independent(tiny_tok):
    ids = tiny_tok.encode(PROC_TEXT, add_special_tokens=False)
    proc = OutputProcessor(tiny_tok, "r1", [], SamplingParams(n=2, stop=["東京"]))
    short = tiny_tok.encode("naïve café", add_special_tokens=False)
    for d0, d1 in zip(_deltas(ids), _deltas(short, finish_reason="length") + [None] * len(ids), strict=False):
        proc.process(d0)
        if d1 is not None:
            proc.process(TokenDelta(R1, 1, d1.token_ids, finish_reason=d1.finish_reason))
    a, b = proc.output.outputs
    assert a.text == "Héllo wörld, naïve café; " and a.finish_reason == "stop" and a.stop_reason == "東京"
    assert b.text == "naïve café" and b.finish_reason == "length" and b.stop_reason is None
    assert proc.stopped_by_string(0) and not proc.stopped_by_string(1)
    assert proc.output.finished
