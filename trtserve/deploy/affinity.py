"""Prefix affinity: requests whose prompts start with the same block of tokens should land on the same
replica, where that block (and usually more) is already in the prefix cache.

The key is a hash of the prompt's first KV block of tokens (the prefix cache's unit: a request that
shares less than one block with another can reuse nothing of it). Replicas are ranked for a key by
rendezvous hashing (highest random weight), so adding or removing a replica moves only the keys it
owned. Plain functions over ints and strings, so they are tested without Ray.
"""

from __future__ import annotations

import hashlib
import json

PREFIX_PATHS = ("/v1/completions", "/v1/chat/completions")  # the routes whose body names a prompt


def prefix_key(token_ids: list[int], block_size: int) -> int | None:
    """A 64-bit key of the first `block_size` tokens; None for a prompt shorter than one block (it
    cannot hit the prefix cache, so it goes wherever load is lowest)."""
    if block_size <= 0 or len(token_ids) < block_size:
        return None
    raw = ",".join(map(str, token_ids[:block_size])).encode()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big")


def rank_replicas(key: int, replicas: list[str]) -> list[str]:
    """`replicas` (stable ids) best first for `key`; the order depends only on the key and the ids."""

    def weight(replica: str) -> bytes:
        return hashlib.blake2b(f"{key}:{replica}".encode(), digest_size=8).digest()

    return sorted(replicas, key=weight, reverse=True)


def prompt_tokens(path: str, body: bytes, tokenizer) -> list[int] | None:
    """The prompt's token ids as the server will see them, or None when the body names no single
    prompt we can read (other routes, bad JSON, a batch of prompts): such requests go to the least loaded
    replica, and the replica itself reports any error."""
    if path not in PREFIX_PATHS:
        return None
    try:
        req = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(req, dict):
        return None
    if path.endswith("/chat/completions"):
        messages = req.get("messages")
        if not isinstance(messages, list):
            return None
        try:
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        except Exception:  # a template error is the replica's to report, with its own message
            return None
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        return list(ids)
    prompt = req.get("prompt")
    if isinstance(prompt, str):
        return list(tokenizer.encode(prompt))
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return prompt
    return None
