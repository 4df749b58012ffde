"""Receipts: every generation gets an id (X-Trtserve-Receipt); with `--receipts on|hashes` its
receipt is stored (engine fingerprint, sampling params with the seed used, token ids and their
sha256, cache namespace and version, timings) and can be fetched and replayed."""
