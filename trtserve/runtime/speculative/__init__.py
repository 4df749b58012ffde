"""Speculative decoding in the torch engine: proposers, per-sequence state, verification."""
