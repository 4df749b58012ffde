"""Weight-only --quant formats on the families with experts, built without ModelOpt (build/weight_only.py):
each family x format engine agrees with HF transformers running the same checkpoint with every linear
(attention, each expert's gate/up/down, a shared expert) replaced by its quantized-then-dequantized weight,
as test_quant_families.py's engines agree with ModelOpt's fake-quant model; the experts stay quantized
per expert in the engine and run on the C expert kernel (kernels/experts.h reads them in place), op by op
and inside the one-call decode step, batched greedy the same tokens as the torch path; every other format
is refused in one sentence naming the pair."""

from __future__ import annotations

import pytest
import torch
from family_goldens import build, make_model
from quant_reference import assert_matches_reference
from safetensors.torch import load_file, save_file

from trtserve import LLM, SamplingParams
from trtserve.engine.errors import UserError
from trtserve.kernels import decode_layers
from trtserve.kernels import experts as expert_kernel
from trtserve.models.batch import SeqChunk, make_batch
from trtserve.models.moe import WEIGHT_ONLY, Experts
from trtserve.models.quant_formats import quant_names
from trtserve.models.quantized import Int4Groupwise, Int8WeightOnly
from trtserve.models.registry import _FAMILIES
from trtserve.runtime.loader import load_engine

# every linear's in-features a multiple of 128 (the int4 group); initializer_range as test_quant_families'
SHAPE = dict(hidden_size=128, intermediate_size=128, initializer_range=0.05)
FAMILIES = {
    "mixtral": dict(num_local_experts=8, num_experts_per_tok=2),
    "qwen2_moe": dict(
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128, shared_expert_intermediate_size=128,
        num_hidden_layers=3, mlp_only_layers=[1],
    ),
    "qwen3_moe": dict(head_dim=32, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128, norm_topk_prob=True),
    "olmoe": dict(num_experts=16, num_experts_per_tok=4),
    "gpt_oss": dict(num_local_experts=8, num_experts_per_tok=2, head_dim=32, sliding_window=8, swiglu_limit=2.0),
}  # fmt: skip
KERNELS = {"w8a16": Int8WeightOnly, "w4a16": Int4Groupwise}
PAIRS = [(name, quant) for name in FAMILIES for quant in sorted(WEIGHT_ONLY)]
# HF checkpoint tensors kept float, as ModelOpt keeps them: routers and the shared expert's gate
FLOAT = ("mlp.gate.weight", "block_sparse_moe.gate.weight", "mlp.router.weight", "shared_expert_gate.weight")
STACKED = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")  # gpt-oss's experts, stored (E, in, out)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Family name -> its tiny checkpoint, made on first use."""
    made = {}

    def get(name):
        if name not in made:
            made[name] = make_model(tmp_path_factory.mktemp(name) / "hf", name, seed=2, **SHAPE | FAMILIES[name])
        return made[name]

    return get


def fake_quant(w: torch.Tensor, quant: str) -> torch.Tensor:
    """w (..., out, in) quantized and dequantized with ModelOpt's weight-only math: int8 per output row
    (amax / 127), or int4 per group of 128 inputs (amax / 7, values in [-8, 7])."""
    bits, group = (8, w.shape[-1]) if quant == "w8a16" else (4, 128)
    top = 2 ** (bits - 1) - 1
    g = w.unflatten(-1, (-1, group))
    scale = g.abs().amax(dim=-1, keepdim=True) / top
    return ((g / scale).round().clamp(-top - 1, top) * scale).flatten(-2)


def reference_model(src, quant: str, tmp_path):
    """HF transformers' model of the checkpoint with every linear's weight fake-quantized."""
    from transformers import AutoModelForCausalLM

    ref = tmp_path / "reference"
    ref.mkdir()
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            (ref / f.name).write_bytes(f.read_bytes())
    t = load_file(src / "model.safetensors")
    for name, w in t.items():
        if name.endswith(STACKED):
            t[name] = fake_quant(w.transpose(-1, -2), quant).transpose(-1, -2).contiguous()
        elif ".layers." in name and name.endswith(".weight") and w.dim() == 2 and not name.endswith(FLOAT):
            t[name] = fake_quant(w, quant)
    save_file(t, ref / "model.safetensors", metadata={"format": "pt"})
    return AutoModelForCausalLM.from_pretrained(ref, dtype=torch.float32).eval()


@pytest.mark.parametrize(("name", "quant"), PAIRS, ids=[f"{n}-{q}" for n, q in PAIRS])
def test_each_family_and_format_matches_the_fake_quantized_model(sources, tmp_path, name, quant):
    assert _FAMILIES[name].quant_formats == WEIGHT_ONLY
    src, out = sources(name), tmp_path / "engine"
    build(src, out, quant=quant, dtype="float32")
    assert_matches_reference(out, reference_model(src, quant, tmp_path), quant)
    model = load_engine(out, device="cpu").model
    moe = [layer.experts for layer in model.layers if layer.experts is not None]
    cfg, kernel = model.cfg, KERNELS[quant]
    # each expert's [gate; up] and down held quantized on its own, which the C expert kernel reads
    assert moe and isinstance(model.layers[0].qkv, kernel)
    runs = expert_kernel.load() is not None  # not under TRTSERVE_ISA=scalar
    if runs and model.family.features_of(cfg) <= decode_layers.FEATURES:
        assert model.step_weights is not None and len(model.step_weights.experts) == len(moe)
    for experts in moe:
        assert (experts.packed is not None) == runs and experts.router.dtype == torch.float32
        assert len(experts.fc_gate) == len(experts.proj) == cfg.moe.num_experts
        assert all(isinstance(lin, kernel) for lin in experts.fc_gate + experts.proj)
    held = sum(_bytes(lin) for experts in moe for lin in experts.fc_gate + experts.proj)
    floats = len(moe) * cfg.moe.num_experts * 3 * cfg.moe_intermediate_size * cfg.hidden_size * 4
    assert held < floats / (3.5 if quant == "w8a16" else 6)  # int8 / int4 with their scales, not float32


def _bytes(linear) -> int:
    return sum(v.numel() * v.element_size() for v in vars(linear).values() if isinstance(v, torch.Tensor))


@pytest.mark.parametrize("quant", sorted(WEIGHT_ONLY))
def test_a_step_runs_only_the_experts_its_tokens_use(sources, tmp_path, monkeypatch, quant):
    """One token's prefill reads top_k experts' quantized weights a layer, never the idle ones: the torch
    path counts the experts it runs, the kernel those it reads."""
    src, out = sources("qwen3_moe"), tmp_path / "engine"
    build(src, out, quant=quant, dtype="float32")
    model = load_engine(out, device="cpu").model
    model.step_weights = None  # op by op: the one-call step counts no reads
    group = model.cfg.num_attention_heads // model.cfg.num_key_value_heads
    for use_kernel in (False, True):
        for layer in model.layers:
            layer.experts.use_kernel, layer.experts.reads.read = use_kernel, 0
        batch = make_batch([SeqChunk([5], 0, [0])], 16, logit_rows=[range(1)], gqa_group=group)
        with monkeypatch.context() as m:
            if use_kernel and expert_kernel.load() is not None:  # the kernel's, not the torch path's count
                m.setattr(Experts, "grouped", _no_torch_path)
            model.forward(batch, model.new_kv_cache(1, 16))
        assert [layer.experts.reads.read for layer in model.layers] == [model.cfg.moe.top_k] * len(model.layers)


def _no_torch_path(self, x, linear):
    raise AssertionError("the torch path ran")


@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe", "gpt_oss"])
@pytest.mark.parametrize("quant", sorted(WEIGHT_ONLY))
def test_batched_greedy_is_the_same_on_every_path(sources, tmp_path, name, quant):
    """Four sequences decoded together: the one-call step (where the family's features allow it), the kernel
    op by op and the torch path give the same tokens (several experts active a step, some idle)."""
    src, out = sources(name), tmp_path / "engine"
    build(src, out, quant=quant, dtype="float32")
    llm = LLM(out, device="cpu", kv_cache_memory=16 << 20)
    model, params = llm.engine.model, SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    prompts = [[5 + i, 9, 17, 33 + 2 * i] for i in range(4)]

    def tokens():
        return [o.token_ids for o in llm.generate(prompts, params)]

    step, moe = model.step_weights, [layer.experts for layer in model.layers if layer.experts is not None]
    with_step = tokens()
    model.step_weights = None
    op_by_op = tokens()
    for experts in moe:
        experts.use_kernel = False
    assert with_step == op_by_op == tokens()
    assert step is None or len(step.experts) == len(moe)


REFUSED = [q for q in quant_names() if q not in WEIGHT_ONLY]


@pytest.mark.parametrize("name", list(FAMILIES))
@pytest.mark.parametrize("quant", REFUSED)
def test_other_formats_are_refused_in_one_sentence(sources, tmp_path, name, quant):
    with pytest.raises(
        UserError, match=rf"^--quant {quant} is not supported for {name} models \(supported: w4a16, w8a16\)"
    ) as err:
        build(sources(name), tmp_path / "e", quant=quant)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "e").exists()


def test_a_kv_cache_format_is_refused_without_modelopt_calibration(sources, tmp_path):
    with pytest.raises(UserError, match="--kv-cache-quant needs ModelOpt's calibration, which --quant w8a16") as err:
        build(sources("mixtral"), tmp_path / "e", quant="w8a16", kv_cache_quant="fp8")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "e").exists()


def test_int8_activations_are_refused_on_experts_in_one_sentence(sources, tmp_path):
    """The expert kernel runs int4 experts on float activations: the run option names the engine kind, not
    a quant format the engine already has."""
    build(sources("qwen3_moe"), tmp_path / "e", quant="w4a16")
    with pytest.raises(UserError, match="^int8_activations is not supported for mixture-of-experts engines") as err:
        LLM(tmp_path / "e", device="cpu", int8_activations=True)
    assert "\n" not in str(err.value)
