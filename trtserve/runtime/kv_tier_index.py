"""The second KV tier's durable index: which prefix key each slot of blocks.bin holds, and its checksum.

Written atomically (a temporary file, fsync, rename) on a clean stop, every persist_interval_s and
after an invalidation, so a restarted engine finds the prefixes its predecessor held. Read back only
if it is whole and was written by the same engine (fingerprint) for the same block geometry: anything
else is refused as a whole and the tier starts empty. A block whose bytes fail its checksum is refused
when it is looked up (kv_tier_store.py).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from trtserve.runtime.kv_tier_store import Entry, Geometry

log = logging.getLogger(__name__)
INDEX_FILE = "index.json"
FORMAT = "trtserve-kv-tier/1"


def write_index(directory: Path, fingerprint: str, geometry: Geometry, entries: dict[bytes, Entry]) -> None:
    """Replace the index by one naming `entries` (in LRU order); never half-written."""
    body = {
        "format": FORMAT,
        "fingerprint": fingerprint,
        "block": {"shape": list(geometry.shape), "dtype": geometry.dtype},
        "entries": [[k.hex(), e.slot, e.checksum.hex(), e.namespace, e.version] for k, e in entries.items()],
    }
    tmp = directory / (INDEX_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(body, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / INDEX_FILE)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash
    finally:
        os.close(dir_fd)


def read_index(directory: Path, fingerprint: str, geometry: Geometry) -> dict[bytes, Entry]:
    """The entries of the index in `directory`, or {} (logging why) when there is none to reuse."""
    path = directory / INDEX_FILE
    if not path.exists():
        return {}
    try:
        body = json.loads(path.read_text())
        if body.get("format") != FORMAT:
            raise ValueError(f"format {body.get('format')!r}, not {FORMAT}")
        if body["fingerprint"] != fingerprint:
            log.warning("kv_offload: %s was written by another engine (%s); not reused", path, body["fingerprint"])
            return {}
        block = body["block"]
        if (tuple(block["shape"]), block["dtype"]) != (geometry.shape, geometry.dtype):
            log.warning("kv_offload: %s holds blocks of another shape or dtype; not reused", path)
            return {}
        entries = {bytes.fromhex(k): Entry(int(s), bytes.fromhex(c), ns, v) for k, s, c, ns, v in body["entries"]}
    except (OSError, ValueError, KeyError, TypeError) as err:  # json's errors are ValueErrors
        log.warning("kv_offload: %s is damaged (%s); starting with an empty second tier", path, err)
        return {}
    log.info("kv_offload: %d blocks from %s", len(entries), path)
    return entries
