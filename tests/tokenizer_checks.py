"""trtserve's tokenizer (engine/tokenizer.py) against transformers' AutoTokenizer on the same dir:
encode, decode, the vocabulary, special tokens, chat templates and the EOS ids load_tokenizer gives."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

TEXTS = [
    "",
    " ",
    "Hello world",
    "  leading and trailing  ",
    "tabs\tand\nnewlines\n\n\r\n",
    "Héllo wörld, naïve café; 東京 and 北京",
    "emoji 🙂🙃 and a family 👩\u200d👩\u200d👧",
    "non-breaking\u00a0space and \u200bzero width",
    "It's, isn't it? Yes . No !",
    "a" * 200,
    "<s>special</s> inside text <unk>",
    "<|im_start|>user\nhi<|im_end|>",
    "</s>",
]


def conversations(tool_calls: bool) -> list[list[dict]]:
    convs = [
        [{"role": "user", "content": "Hello!"}],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "東京はどこ? 🙂"},
            {"role": "assistant", "content": "In Japan."},
            {"role": "user", "content": "  and  whitespace\n\n"},
        ],
        [{"role": "user", "content": ""}],
    ]
    if tool_calls:  # content None is dropped (as transformers does) before the template sees it
        call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}
        convs.append(
            [
                {"role": "user", "content": "Weather in Zürich?"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "content": '{"temp": 21}'},
            ]
        )
    return convs


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather — °C",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def check_same_as_hf(path: Path, tool_calls: bool = True) -> None:
    """Everything trtserve asks of a tokenizer equals transformers' answer for the dir at `path`."""
    from transformers import AutoTokenizer

    from trtserve.engine.tokenizer import Tokenizer

    ours, hf = Tokenizer(path), AutoTokenizer.from_pretrained(str(path))
    assert ours.get_vocab() == hf.get_vocab() and len(ours) == len(hf) and ours.vocab_size == hf.vocab_size
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        assert getattr(ours, name) == getattr(hf, name), name
        assert getattr(ours, name + "_id") == getattr(hf, name + "_id"), name
    for text in TEXTS:
        for special in (True, False):
            ids = ours.encode(text, add_special_tokens=special)
            assert ids == hf.encode(text, add_special_tokens=special), (text, special)
            assert (
                ours(text, add_special_tokens=special)["input_ids"] == hf(text, add_special_tokens=special)["input_ids"]
            )
        for skip in (True, False):
            for clean in (None, False):
                assert ours.decode(ids, skip, clean) == hf.decode(
                    ids, skip_special_tokens=skip, clean_up_tokenization_spaces=clean
                )
    rng = random.Random(0)
    for _ in range(50):  # arbitrary ids: special tokens, byte tokens cut mid-character
        ids = [rng.randrange(len(hf)) for _ in range(rng.randrange(1, 12))]
        assert ours.decode(ids) == hf.decode(ids)
        assert ours.decode(ids, skip_special_tokens=True) == hf.decode(ids, skip_special_tokens=True)
        assert ours.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
    assert ours.decode(ids[0]) == hf.decode(ids[0])
    assert ours.chat_template == hf.chat_template
    for conv in conversations(tool_calls):
        for tools in (None, TOOLS):
            for gen in (True, False):
                kw = {"tools": tools, "add_generation_prompt": gen}
                same_chat(ours, hf, conv, tokenize=False, **kw)
                same_chat(ours, hf, conv, tokenize=True, **kw)
                same_chat(ours, hf, conv, tokenize=True, return_dict=False, **kw)


def same_chat(ours, hf, conv, **kw) -> None:
    """apply_chat_template gives the same text or ids, or both raise the same kind of error (a template
    that rejects the chat)."""

    def ids_or_text(out):
        if isinstance(out, str):
            return out
        return list(out["input_ids"] if hasattr(out, "keys") else out)  # a dict (BatchEncoding) or the ids

    try:
        want = ids_or_text(hf.apply_chat_template(conv, **kw))
    except Exception as err:
        with pytest.raises(type(err)):
            ours.apply_chat_template(conv, **kw)
        return
    assert ids_or_text(ours.apply_chat_template(conv, **kw)) == want, (conv, kw)


def old_eos_ids(path: Path) -> list[int]:
    """load_tokenizer's EOS ids as it found them with transformers: the tokenizer's, then generation_config.json's."""
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(str(path))
    ids = [tok.eos_token_id] if tok.eos_token_id is not None else []
    try:
        gen = GenerationConfig.from_pretrained(str(path)).eos_token_id
    except OSError:
        gen = None
    for t in gen if isinstance(gen, list) else [gen] if gen is not None else []:
        if t not in ids:
            ids.append(t)
    return ids
