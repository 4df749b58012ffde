"""An engine dir's tokenizer on the `tokenizers` library alone: what a start needs, without the
import of transformers, a large part of a cold start.

It reads tokenizer.json, tokenizer_config.json and the chat template the way transformers'
AutoTokenizer reads them for a tokenizer.json-backed tokenizer, and offers exactly the part of the
HF tokenizer API trtserve uses: encode / decode / __call__, apply_chat_template (engine/chat_template.py),
get_vocab / len, the special tokens and their ids, convert_ids_to_tokens / convert_tokens_to_ids.
Whoever needs the full HF tokenizer (xgrammar's TokenizerInfo) gets it from `huggingface()`, loaded
on first use.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from trtserve.engine.chat_template import render

TOKENIZER_JSON = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _content(token) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    return token.get("content") if isinstance(token, dict) else token


def read_chat_template(path: Path, config: dict) -> str | dict | None:
    """chat_template.jinja (and additional_chat_templates/*.jinja) first, then tokenizer_config.json's."""
    templates = {}
    if (path / "chat_template.jinja").is_file():
        templates["default"] = (path / "chat_template.jinja").read_text(encoding="utf-8")
    extra = path / "additional_chat_templates"
    for f in sorted(extra.glob("*.jinja")) if extra.is_dir() else []:
        templates[f.stem] = f.read_text(encoding="utf-8")
    if templates:
        return templates["default"] if list(templates) == ["default"] else templates
    source = config.get("chat_template") or read_json(path / "chat_template.json").get("chat_template")
    if isinstance(source, list):  # [{"name": ..., "template": ...}]
        return {t["name"]: t["template"] for t in source}
    return source


class Tokenizer:
    """The tokenizer of an engine dir's tokenizer/ (which holds tokenizer.json)."""

    def __init__(self, path: Path):
        from tokenizers import AddedToken
        from tokenizers import Tokenizer as RustTokenizer

        self.path = Path(path)
        config = read_json(self.path / TOKENIZER_CONFIG)
        self._tok = RustTokenizer.from_file(str(self.path / TOKENIZER_JSON))
        self._tok.no_truncation()  # transformers turns both off for a call that does not ask for them
        self._tok.no_padding()
        self.special_tokens_map = {k: _content(config[k]) for k in SPECIAL_TOKENS if _content(config.get(k))}
        extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
        extra = list(extra.values() if isinstance(extra, dict) else extra)
        tok = self._tok  # token_to_id: get_vocab() would build a dict of every token
        declared = [AddedToken(**{"special": True, **t}) for t in _added_in_config(config)]
        declared = [t for t in declared if tok.token_to_id(t.content) is None]
        missing = [_content(t) for t in [*self.special_tokens_map.values(), *extra]]
        missing = [t for t in missing if tok.token_to_id(t) is None]
        if declared or missing:  # as transformers does: tokens the config names join the vocabulary as special
            self._tok.add_special_tokens([*declared, *(AddedToken(t, special=True) for t in missing)])
        # add_bos_token / add_eos_token are not read: with a tokenizer.json its post-processor decides (as transformers 5)
        self.clean_up_tokenization_spaces = bool(config.get("clean_up_tokenization_spaces", False))
        self.chat_template = read_chat_template(self.path, config)
        self._hf = None
        self._hf_lock = threading.Lock()

    # ---- the special tokens ---------------------------------------------------------------------
    bos_token = property(lambda self: self.special_tokens_map.get("bos_token"))
    eos_token = property(lambda self: self.special_tokens_map.get("eos_token"))
    pad_token = property(lambda self: self.special_tokens_map.get("pad_token"))
    unk_token = property(lambda self: self.special_tokens_map.get("unk_token"))
    bos_token_id = property(lambda self: self._id(self.bos_token))
    eos_token_id = property(lambda self: self._id(self.eos_token))
    pad_token_id = property(lambda self: self._id(self.pad_token))
    unk_token_id = property(lambda self: self._id(self.unk_token))

    def _id(self, token: str | None) -> int | None:
        return None if token is None else self.convert_tokens_to_ids(token)

    # ---- text <-> ids ---------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def __call__(self, text: str, add_special_tokens: bool = True, **_) -> dict[str, list[int]]:
        ids = self.encode(text, add_special_tokens)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}

    def decode(self, ids, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None) -> str:
        ids = [ids] if isinstance(ids, int) else list(ids)
        text = self._tok.decode(ids, skip_special_tokens=skip_special_tokens)
        clean = (
            self.clean_up_tokenization_spaces if clean_up_tokenization_spaces is None else clean_up_tokenization_spaces
        )
        if clean and type(self._tok.model).__name__ != "BPE":  # transformers never cleans up after BPE
            for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't")):
                text = text.replace(a, b)
            for a in ("m", "s", "ve", "re"):
                text = text.replace(" '" + a, "'" + a)
        return text

    def convert_ids_to_tokens(self, ids):
        return self._tok.id_to_token(ids) if isinstance(ids, int) else [self._tok.id_to_token(i) for i in ids]

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            found = self._tok.token_to_id(tokens)
            return found if found is not None else self._id(self.unk_token)
        return [self.convert_tokens_to_ids(t) for t in tokens]

    def get_vocab(self) -> dict[str, int]:
        return self._tok.get_vocab(with_added_tokens=True)

    def __len__(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    @property
    def vocab_size(self) -> int:
        """The base vocabulary, without the added tokens (as transformers' vocab_size)."""
        return self._tok.get_vocab_size(with_added_tokens=False)

    # ---- chat -----------------------------------------------------------------------------------
    def get_chat_template(self, chat_template: str | None = None, tools=None) -> str:
        templates = self.chat_template
        if isinstance(templates, dict):
            if chat_template in templates:
                return templates[chat_template]
            if chat_template is None:
                name = "tool_use" if tools is not None and "tool_use" in templates else "default"
                if name not in templates:
                    raise ValueError(f"this tokenizer has several chat templates and no default: {sorted(templates)}")
                return templates[name]
        if chat_template is None and templates is None:
            raise ValueError("the tokenizer has no chat template; give one in its tokenizer_config.json")
        return chat_template or templates

    def apply_chat_template(
        self,
        conversation,
        tools=None,
        documents=None,
        chat_template: str | None = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        return_dict: bool = True,
        **kwargs,
    ):
        """transformers' apply_chat_template for one conversation: the text, or its ids (as {"input_ids": ids}
        when return_dict, the default)."""
        source = self.get_chat_template(chat_template, tools)
        text = render(
            source,
            conversation,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            **{**self.special_tokens_map, **kwargs},
        )
        if not tokenize:
            return text
        ids = self.encode(text, add_special_tokens=False)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)} if return_dict else ids

    # ---- the full HF tokenizer, for whoever needs one -------------------------------------------
    def huggingface(self):
        """transformers' AutoTokenizer for the same dir, loaded once on first use (xgrammar wants one)."""
        with self._hf_lock:
            if self._hf is None:
                from transformers import AutoTokenizer

                self._hf = AutoTokenizer.from_pretrained(str(self.path))
            return self._hf


def _added_in_config(config: dict) -> list[dict]:
    """tokenizer_config.json's added_tokens_decoder entries, as AddedToken keyword arguments."""
    keys = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")
    return [{k: t[k] for k in keys if k in t} for t in (config.get("added_tokens_decoder") or {}).values()]


def huggingface_tokenizer(tokenizer):
    """The HF tokenizer behind `tokenizer`: itself if it is one already."""
    return tokenizer.huggingface() if isinstance(tokenizer, Tokenizer) else tokenizer
