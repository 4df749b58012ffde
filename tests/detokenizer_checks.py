"""Detokenizer checks shared by tests/unit/test_detokenizer.py and the SmolLM2 check in tests/integration."""

from __future__ import annotations

from trtserve.text.detokenizer import IncrementalDetokenizer

FFFD = "\ufffd"
TEXTS = [
    "東京と北京",
    "👩\u200d👩\u200d👧\u200d👦 family",
    "🇫🇷",
    "e\u0301",
    "naïve café",
    "Hello 東京 🙂 world, naïve 🇫🇷 café",
    "plain ASCII text, nothing special.",
]
MULTIBYTE = [t for t in TEXTS if not t.isascii()]


def decode(tok, ids) -> str:
    return tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def stream(tok, prompt, ids, chunk: int = 1) -> tuple[list[str], str]:
    det = IncrementalDetokenizer(tok, prompt)
    deltas = [det.add(ids[i : i + chunk]) for i in range(0, len(ids), chunk)]
    return deltas, det.flush()


def check_all_prefixes(tok, text: str, prompt: list[int], chunk: int = 1) -> int:
    """Stream every prefix ids[:k] of text's tokens; the deltas plus flush must equal the full decode.

    Returns how many prefixes end in the middle of a character (so callers can check that case ran)."""
    ids = tok.encode(text, add_special_tokens=False)
    mid_char = 0
    for k in range(1, len(ids) + 1):
        out = ids[:k]
        deltas, tail = stream(tok, prompt, out, chunk)
        want = decode(tok, out)
        assert "".join(deltas) + tail == want, (text, prompt, k, deltas, tail)
        # Nothing broken is emitted while streaming: the input text has no U+FFFD, so any would be a split character.
        assert not any(FFFD in d for d in deltas), (text, prompt, k, deltas)
        if want.endswith(FFFD):
            mid_char += 1
            assert FFFD in tail  # the incomplete character is released by flush, as the full decode has it
    return mid_char
