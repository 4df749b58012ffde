"""Per-layer attention windows in the batch builder: a local layer's mask admits exactly the keys within
its window of each query (HF's kv_idx > q_idx - window), whether the keys were cached by an earlier chunk
or a prefix hit, or run in this step; a global layer's admits every key up to the query."""

from __future__ import annotations

import torch

from trtserve.engine.model_config import ModelConfig
from trtserve.models.batch import SeqChunk, make_batch

BS = 4  # tokens per block


def _keys_seen(batch, window, row: int) -> list[int]:
    """The key positions query row `row` of a one-sequence batch attends to under the window's mask."""
    mask = batch.groups[0].attn_mask(window)[0, 0, row]  # (keys,): gqa_group 1, so row r is query row r
    return mask.nonzero().squeeze(1).tolist()


def test_a_local_layer_sees_only_the_keys_in_its_window():
    # 10 tokens cached (a prefix hit or an earlier chunk), 3 new ones at positions 10, 11, 12
    batch = make_batch([SeqChunk([5, 6, 7], 10, [0, 1, 2, 3])], BS)
    for row, pos in enumerate(range(10, 13)):
        assert _keys_seen(batch, 4, row) == list(range(pos - 3, pos + 1))
        assert _keys_seen(batch, None, row) == list(range(pos + 1))


def test_each_sequence_of_a_batch_keeps_its_own_window():
    seqs = [SeqChunk([1] * 9, 0, [0, 1, 2]), SeqChunk([2], 20, list(range(3, 9)))]  # a prompt, a decode row
    batch = make_batch(seqs, BS)
    for g in batch.groups:
        for s, kv_len in enumerate(g.kv_lens.tolist()):
            q_len = int(g.q_valid[s].sum())
            for row in range(q_len):
                pos = kv_len - q_len + row
                keys = g.attn_mask(3)[s, 0, row].nonzero().squeeze(1).tolist()
                assert keys == list(range(max(0, pos - 2), pos + 1))


def test_gqa_rows_share_their_query_rows_window():
    batch = make_batch([SeqChunk([1] * 6, 0, [0, 1])], BS, gqa_group=3)
    mask = batch.groups[0].attn_mask(2)[0, 0]  # (3 * 6, keys): query head k's rows after head k-1's
    for r in range(18):
        pos = r % 6
        assert mask[r].nonzero().squeeze(1).tolist() == list(range(max(0, pos - 1), pos + 1))


def test_sequences_without_cached_keys_group_apart_and_build_no_causal_mask():
    batch = make_batch([SeqChunk([1, 2, 3], 0, [0]), SeqChunk([4, 5], 1, [1]), SeqChunk([6], 0, [2])], BS)
    fresh, cached = batch.groups
    assert fresh.fresh == ((0, 3), (5, 1))  # (flat offset, rows): they attend causally to their own rows only
    assert fresh.attn_masks == cached.attn_masks == {}  # no mask until a layer's torch path asks for one
    assert cached.fresh == ()
    assert cached.q_start.tolist() == [3] and cached.q_lens.tolist() == [2]  # what the prompt kernel reads instead
    assert torch.equal(fresh.attn_mask(None)[0, 0, :3, :3], torch.ones(3, 3, dtype=torch.bool).tril())  # on request


def test_a_windows_mask_is_built_on_first_use():
    batch = make_batch([SeqChunk([5, 6, 7], 10, [0, 1, 2, 3])], BS)
    assert batch.groups[0].attn_masks == {}
    assert _keys_seen(batch, 4, 2) == [9, 10, 11, 12]
    assert list(batch.groups[0].attn_masks) == [4]
    assert batch.groups[0].attn_mask(4) is batch.groups[0].attn_mask(4)  # built once


def test_the_model_config_names_each_layers_window():
    base = dict(architecture="Gemma2ForCausalLM", dtype="float32", vocab_size=8, hidden_size=8, num_hidden_layers=4,
                num_attention_heads=2, num_key_value_heads=1, head_size=4, intermediate_size=8,
                max_position_embeddings=64, norm_epsilon=1e-6, rotary_base=1e4)  # fmt: skip
    gemma = ModelConfig(**base, sliding_window=16, layer_windows=[16, None, 16, None])
    assert [gemma.window(i) for i in range(4)] == [16, None, 16, None]
    assert gemma.attention_windows == (16, None)
    assert gemma.kv_layer_kinds() == {16: 2, None: 2}
    mistral = ModelConfig(**base, sliding_window=16)
    assert mistral.attention_windows == (16,) and mistral.kv_layer_kinds() == {16: 4}
    assert ModelConfig(**base).attention_windows == (None,)
    # every layer keeps every block (docs/building.md says why): a token costs the same in each layer
    assert gemma.kv_bytes_per_token() == mistral.kv_bytes_per_token() == 2 * 4 * 4 * 4
