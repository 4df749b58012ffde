"""The expert kernel (kernels/experts.c): one layer's mixture of experts equals HF transformers' sparse
MoE blocks (softmax top-k router, renormalized or not, a shared expert under a sigmoid gate) for a decode
row, a few rows and prompts longer than one piece of the kernel; bf16 within rounding of the torch path;
and a step of one token reads only its top-k experts' weights (the others' pages are unreadable)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from trtserve.kernels import experts as kernel
from trtserve.models.moe import Experts

needs_kernel = pytest.mark.skipif(kernel.load() is None, reason="no C kernels on this machine (TRTSERVE_ISA=scalar)")
ROWS = (1, 3, 40, 300)  # a decode row, a few, a prompt (300: past one 256-row piece, > 64 rows an expert)


def _hf_block(model_type: str, seed: int, **cfg):
    from transformers import AutoConfig
    from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

    torch.manual_seed(seed)
    config = AutoConfig.for_model(model_type, hidden_size=64, **cfg)
    block = {"qwen2_moe": Qwen2MoeSparseMoeBlock, "olmoe": OlmoeSparseMoeBlock}[model_type](config).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.2)
    return block, config


def _experts(block, config) -> Experts:
    """Our Experts over the HF block's weights ([gate; up] is our [fc (activated); gate])."""
    shared = {}
    if getattr(block, "shared_expert", None) is not None:
        s = block.shared_expert
        shared = dict(
            shared_fc_gate=torch.cat([s.gate_proj.weight, s.up_proj.weight]).detach(),
            shared_proj=s.down_proj.weight.detach(),
            shared_gate=block.shared_expert_gate.weight.detach(),
        )
    e = block.experts
    args = block.gate.weight.detach(), e.gate_up_proj.detach(), e.down_proj.detach()
    return Experts(*args, config.num_experts_per_tok, config.norm_topk_prob, **shared)


CASES = {
    "qwen2_moe-shared-renormalized": (
        "qwen2_moe",
        dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=48, shared_expert_intermediate_size=80)
        | dict(norm_topk_prob=True),
    ),
    "olmoe-top8-of-64": ("olmoe", dict(num_experts=64, num_experts_per_tok=8, intermediate_size=32)),
}


@needs_kernel
@pytest.mark.parametrize("case", CASES)
def test_the_kernel_equals_hf_sparse_blocks(case):
    block, config = _hf_block(*CASES[case][:1], seed=1, **CASES[case][1])
    experts = _experts(block, config)
    assert experts.packed is not None
    torch.manual_seed(0)
    for rows in ROWS:
        x = torch.randn(rows, 64)
        with torch.inference_mode():
            got, want = kernel.run(experts.packed, x)[0], block(x[None])[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_bf16_is_the_torch_paths_up_to_rounding():
    block, config = _hf_block("qwen2_moe", seed=2, **CASES["qwen2_moe-shared-renormalized"][1])
    f32 = _experts(block, config)
    bf16 = Experts(
        f32.router.bfloat16(), f32.fc_gate.bfloat16(), f32.proj.bfloat16(), 2, True,
        f32.shared_fc_gate.bfloat16(), f32.shared_proj.bfloat16(), f32.shared_gate.bfloat16(),
    )  # fmt: skip
    torch.manual_seed(0)
    for rows in ROWS:
        x = torch.randn(rows, 64).bfloat16()
        got, want = kernel.run(bf16.packed, x)[0], bf16.grouped(x, torch.nn.functional.linear)
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), want.float(), rtol=0.02, atol=0.03)


def test_quantized_or_mismatched_weights_take_the_torch_path():
    e, h, i = 4, 64, 32
    w = dict(gates=torch.randn(e, h), fc_gate=torch.randn(e, 2 * i, h), proj=torch.randn(e, h, i))
    assert kernel.pack(**w, top_k=2, renormalize=True) is not None
    assert kernel.pack(**w | {"proj": w["proj"].to(torch.int8)}, top_k=2, renormalize=True) is None
    assert kernel.pack(**w | {"proj": w["proj"][:, :, :16]}, top_k=2, renormalize=True) is None  # not contiguous
    assert kernel.pack(**w, top_k=kernel.MAX_TOP_K + 1, renormalize=True) is None


# Run in a child: a read of a protected page kills it with SIGSEGV
_ONLY_TOP_K = textwrap.dedent(
    """
    import ctypes, mmap, torch
    from trtserve.models.moe import Experts
    E, H, I, K = 8, 64, 64, 2
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    def pages(shape):  # an anonymous mapping, page aligned: each expert's weights on pages of their own
        n = 1
        for s in shape:
            n *= s
        mm = mmap.mmap(-1, 4 * n)
        return mm, torch.frombuffer(mm, dtype=torch.float32).view(shape)

    torch.manual_seed(0)
    (fm, fc_gate), (pm, proj) = pages((E, 2 * I, H)), pages((E, H, I))
    fc_gate.copy_(torch.randn(E, 2 * I, H) * 0.1)
    proj.copy_(torch.randn(E, H, I) * 0.1)
    experts = Experts(torch.randn(E, H), fc_gate, proj, K, True)
    x = torch.randn(1, H)
    want = experts.grouped(x, torch.nn.functional.linear)
    used = set(experts.route(x, torch.nn.functional.linear)[1].flatten().tolist())
    for mm, t in ((fm, fc_gate), (pm, proj)):
        base, per = ctypes.addressof(ctypes.c_char.from_buffer(mm)), t[0].numel() * 4
        for e in set(range(E)) - used:
            assert libc.mprotect(base + e * per, per, 0) == 0  # PROT_NONE
    got = experts(x, torch.nn.functional.linear)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    print(len(used), "of", E)
    """
)


@needs_kernel
def test_one_token_reads_only_its_top_k_experts_weights():
    done = subprocess.run([sys.executable, "-c", _ONLY_TOP_K], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]  # -11: the kernel read an idle expert's weights
    assert done.stdout.split() == ["2", "of", "8"]
