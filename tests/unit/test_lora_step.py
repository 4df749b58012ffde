"""A step's LoRA rows: segments of consecutive chunks, the per-segment product (deterministic mode) and
the stacked one (every adapter side by side, a mask per row) agree, and base rows are left exact."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trtserve.engine.adapters import AdapterRef
from trtserve.models.lora import LoraLinear, LoraWeights
from trtserve.models.lora_step import segments_of, stack


def adapter(name, scale):
    a, bt = torch.ones(1, 2), torch.full((1, 3), scale)  # x·Aᵀ·Bᵀ = scale * sum(x) in every column
    return LoraWeights(AdapterRef(name, "sha256:0"), 1, ("q_proj",), [{"qkv": LoraLinear(a, bt)}])


def random_adapter(name, seed, roles, n_layers=2, n_in=8, n_out=6):
    g = torch.Generator().manual_seed(seed)
    layers = []
    for i in range(n_layers):
        r = 2 + seed % 3
        layers.append(
            {
                role: LoraLinear(torch.randn(r, n_in, generator=g), torch.randn(r, n_out, generator=g))
                for role in roles
                if (role, i) != ("dense", 1)  # a role missing from one layer (PEFT's layers_to_transform)
            }
        )
    return LoraWeights(AdapterRef(name, f"sha256:{seed}"), 2, ("q_proj",), layers)


def test_consecutive_chunks_of_one_adapter_share_a_segment_and_base_rows_are_untouched():
    p, q = adapter("p", 1.0), adapter("q", 10.0)
    step = segments_of([(2, p), (1, p), (1, None), (2, q)])
    assert [(s, e, w.ref.name) for s, e, w in step.segments] == [(0, 3, "p"), (4, 6, "q")]
    assert step.num_rows == 6 and step.adapters == (p, q)
    assert segments_of([(3, None)]) is None
    x = torch.ones(6, 2)
    out = step.add(0, "qkv", x, torch.zeros(6, 3), F.linear)
    assert out[:, 0].tolist() == [2.0, 2.0, 2.0, 0.0, 20.0, 20.0]  # the base row (3) is untouched
    assert step.add(0, "dense", x, torch.zeros(6, 3), F.linear).abs().sum() == 0  # not targeted


def test_the_stacked_product_equals_the_per_segment_one_and_leaves_base_rows_exact():
    a = random_adapter("a", 1, ("qkv", "dense"))
    b = random_adapter("b", 2, ("qkv",))
    c = random_adapter("c", 3, ("dense", "proj"))
    rows = [(3, a), (2, None), (1, c), (2, b), (1, a)]
    x = torch.randn(9, 8, generator=torch.Generator().manual_seed(0))
    base = torch.randn(9, 6, generator=torch.Generator().manual_seed(1))
    per_segment, stacked = segments_of(rows), segments_of(rows)
    s = stack(tuple(sorted(stacked.adapters, key=lambda w: w.ref.content_hash)))
    assert s.spans["qkv"] == [(0, 3), (3, 7), (7, 7)]  # a r=3, b r=4, c none
    stacked.use(s)
    for layer in (0, 1):
        for role in ("qkv", "dense", "proj", "fc_gate"):
            want = per_segment.add(layer, role, x, base.clone(), F.linear)
            got = stacked.add(layer, role, x, base.clone(), F.linear)
            torch.testing.assert_close(got, want)
            assert torch.equal(got[3:5], base[3:5])  # base rows: bit for bit


def test_one_adapter_over_every_row_needs_no_mask():
    a = random_adapter("a", 1, ("qkv",))
    step = segments_of([(4, a)])
    step.use(stack((a,)))
    assert step.masks == {}
    x, base = torch.randn(4, 8), torch.randn(4, 6)
    t = a.layers[0]["qkv"]
    want = base + F.linear(x, t.a) @ t.bt
    torch.testing.assert_close(step.add(0, "qkv", x, base.clone(), F.linear), want)
