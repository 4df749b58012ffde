"""A quant format added by registering one spec, in the test: "TOY_W8" quantizes with ModelOpt's INT8
weight-only recipe (as w8a16 does), keeps its scales under its own name and layout (its checkpoint
rule), and runs on its own trivial run-time linear. Built through `trtserve build --quant toy_w8`
and run with `trtserve.LLM`, it holds w8a16's int8 weights and gives w8a16's greedy tokens."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from helpers import make_hf_model, random_prompts
from safetensors.torch import load_file

pytest.importorskip("modelopt")

from trtserve import LLM, SamplingParams  # noqa: E402
from trtserve.cli import main  # noqa: E402
from trtserve.models.quant_formats import (  # noqa: E402
    CheckpointRules,
    ModeloptRecipe,
    QuantFormatSpec,
    register_quant_format,
    unregister_quant_format,
)

PARAMS = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)


class ToyW8Linear:
    """int8 weights times a (out, 1) column of float32 scales, dequantized to the activation dtype per call."""

    def __init__(self, t: dict[str, torch.Tensor], dtype: torch.dtype, group_size: int):
        self.weight = t["weight"]  # (out, in) int8
        self.scale = t["toy_scale"]  # (out, 1) float32

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        w = (self.weight.float() * self.scale).to(x.dtype)  # (out, in)
        return F.linear(x, w, bias)  # (tokens, out)


def scales_as_column(t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The toy's checkpoint rule: its per-row scales as a float32 (out, 1) column."""
    return t | {"toy_scale": t["toy_scale"].float()[:, None]}


TOY = QuantFormatSpec(
    "TOY_W8",
    (ModeloptRecipe("toy_w8", "INT8_WEIGHT_ONLY_CFG", False, "toy: int8 weights, dequantized per call"),),
    block=1,
    linear=ToyW8Linear,
    checkpoint=CheckpointRules(renames={"weight_scale": "toy_scale"}, finish=scales_as_column),
    modelopt_algo="W8A16",  # what ModelOpt's export calls the INT8 weight-only recipe
)


@pytest.fixture
def toy_format(request):
    register_quant_format(TOY)
    request.addfinalizer(lambda: unregister_quant_format(TOY.quant_algo))
    return TOY


def build(src, out, quant: str) -> None:
    args = ["build", str(src), "-o", str(out), "--quant", quant, "--dtype", "float32", "--max-seq-len", "128"]
    result = CliRunner().invoke(main, [*args, "--tokens-per-block", "16", "--quiet"])
    assert result.exit_code == 0, result.output


def test_a_registered_format_builds_and_runs(tmp_path, toy_format):
    src = make_hf_model(tmp_path / "src", "llama")
    build(src, tmp_path / "toy", "toy_w8")
    build(src, tmp_path / "w8a16", "w8a16")

    ckpt = json.loads((tmp_path / "toy" / "checkpoint" / "config.json").read_text())
    assert ckpt["quantization"]["quant_algo"] == "TOY_W8"
    toy, ref = load_file(tmp_path / "toy" / "model.safetensors"), load_file(tmp_path / "w8a16" / "model.safetensors")
    renamed = {n.replace("weights_scaling_factor", "toy_scale"): t for n, t in ref.items()}
    assert sorted(toy) == sorted(renamed)
    for name, t in renamed.items():
        expected = t.float()[:, None] if name.endswith("toy_scale") else t
        assert toy[name].dtype == expected.dtype and torch.equal(toy[name], expected), name

    prompts = random_prompts(4, seed=5)
    ours = LLM(tmp_path / "toy")
    assert isinstance(ours.engine.model.layers[0].qkv, ToyW8Linear)
    got = [o.outputs[0].token_ids for o in ours.generate(prompts, PARAMS)]
    want = [o.outputs[0].token_ids for o in LLM(tmp_path / "w8a16").generate(prompts, PARAMS)]
    assert got == want


def test_unregistered_it_is_refused_again(tmp_path, toy_format):
    unregister_quant_format(TOY.quant_algo)
    result = CliRunner().invoke(main, ["build", str(tmp_path), "-o", str(tmp_path / "e"), "--quant", "toy_w8"])
    assert result.exit_code == 2 and "Invalid value for '--quant'" in result.output
