"""Prefix-cache keys: which cached blocks a request may reuse.

A request's blocks are keyed by a hash chain: block k's key = H(key of block k-1, its token ids),
and the chain starts at a root made of everything that must match for reuse to be safe:

    root = H(engine fingerprint, cache_salt, cache_namespace, context_version, adapter hash[, image hashes])

So a changed engine, a different salt, another namespace, another context version or another LoRA
adapter (or none) never hits an old block: a block cached under version 7 is never reused by a
request that says version 8, nor one computed under adapter A by a request of adapter B or the base.
A prompt with images keys its chain by their content hashes, in order: its image tokens' ids are the
same for every image, so only the same images reuse its blocks (a text-only prompt's root is unchanged).

To count the reuse that the version refused (a metric), the first block of a namespaced,
versioned chain also gets a *head* key: the same hash with the version left out. A lookup that
misses its first block while the head key is cached under another version was refused because
of the version, not because the prefix was never seen.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

MAX_NAMESPACE_LABELS = 64  # namespaces counted by name; the rest are counted as OTHER (bounded metrics)
DEFAULT = "default"  # the label of requests that name no namespace
OTHER = "_other"


@dataclass(frozen=True, slots=True)
class PrefixScope:
    """What must match, besides the tokens, for a request to reuse another's cached blocks."""

    salt: str | None = None  # cache_salt: isolates one client's entries
    namespace: str | None = None  # cache_namespace: a named context (invalidated as a whole)
    version: int | None = None  # context_version: the state of that context the prompt was built from
    adapter: str | None = None  # the LoRA adapter's content hash (AdapterRef.content_hash); None: the base model
    images: tuple[str, ...] = ()  # the prompt's images' content hashes (ImageInput.content_hash), in order

    @classmethod
    def of(cls, scope: PrefixScope | str | None) -> PrefixScope:
        """A scope, or a bare cache_salt (None: no salt) as one."""
        return scope if isinstance(scope, PrefixScope) else cls(salt=scope)

    @property
    def label(self) -> str:
        return self.namespace if self.namespace is not None else DEFAULT

    def matches(self, namespace: str | None, before_version: int | None) -> bool:
        """In `namespace` and, when before_version is given, older than it (no version counts as older)."""
        if self.namespace != namespace:
            return False
        return before_version is None or self.version is None or self.version < before_version


def chain_root(fingerprint: str, scope: PrefixScope | str | None) -> bytes:
    s = PrefixScope.of(scope)
    # JSON keeps the fields apart: no salt can be chosen to collide with another namespace.
    text = json.dumps([fingerprint, s.salt or "", s.namespace, s.version, s.adapter, *_images(s)])
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def _images(scope: PrefixScope) -> list[list[str]]:
    """The root's image part: none for a text-only prompt (its keys stay as they were, KV tiers included)."""
    return [list(scope.images)] if scope.images else []


def block_key(parent: bytes, tokens: Sequence[int]) -> bytes:
    return hashlib.blake2b(parent + array("q", tokens).tobytes(), digest_size=16).digest()


def head_key(fingerprint: str, scope: PrefixScope, first_block: Sequence[int]) -> bytes | None:
    """The version-free key of a versioned chain's first block (None for an unversioned scope)."""
    if scope.version is None:
        return None
    text = json.dumps([fingerprint, scope.salt or "", scope.namespace, "*", scope.adapter, *_images(scope)])
    root = hashlib.blake2b(text.encode(), digest_size=16)
    return block_key(root.digest(), first_block)


class NamespaceCounters:
    """Prompt tokens looked up and found, per namespace label (at most MAX_NAMESPACE_LABELS names)."""

    def __init__(self):
        self.queries: dict[str, int] = {}
        self.hits: dict[str, int] = {}

    def add(self, scope: PrefixScope, queries: int, hits: int) -> None:
        label = scope.label
        if label not in self.queries and len(self.queries) >= MAX_NAMESPACE_LABELS:
            label = OTHER
        self.queries[label] = self.queries.get(label, 0) + queries
        self.hits[label] = self.hits.get(label, 0) + hits

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """label -> (hit tokens, missed tokens)."""
        return {k: (self.hits[k], q - self.hits[k]) for k, q in self.queries.items()}
