"""LoRA adapters on the torch engine: greedy tokens equal HF transformers + PEFT (float32), alone and in
steps mixing three adapters and the base; prefixes are reused within an adapter, never across."""

from __future__ import annotations

import pytest
from helpers import hf_greedy, make_hf_model, make_lora_adapter, peft_greedy, random_prompts

from trtserve import LLM, SamplingParams
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.engine.errors import UserError
from trtserve.kernels import decode_layers
from trtserve.models import decoder as decoder_module

pytest.importorskip("peft")

NEW_TOKENS = 24
ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# name -> (target modules, r, lora_alpha, rsLoRA): attention only, every linear with rsLoRA, the MLP and o
ADAPTERS = {
    "attn": (("q_proj", "v_proj"), 4, 8.0, False),
    "all": (ALL, 8, 16.0, True),
    "mlp": (("o_proj", "gate_proj", "up_proj", "down_proj"), 2, 4.0, False),
}
P = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(HF dir, engine dir, {adapter name: dir}) of a tiny random Llama and three random adapters."""
    d = tmp_path_factory.mktemp("lora")
    src = make_hf_model(d / "hf", "llama", seed=7)
    build_engine(BuildConfig(model=str(src), tokens_per_block=16), d / "engine", quiet=True)
    adapters = {
        name: make_lora_adapter(src, d / name, targets, r, alpha, rslora, seed=i)
        for i, (name, (targets, r, alpha, rslora)) in enumerate(ADAPTERS.items())
    }
    return src, d / "engine", adapters


@pytest.fixture(scope="module")
def prompts():
    return random_prompts(4, seed=3)


@pytest.fixture(scope="module")
def expected(model, prompts):
    """Each adapter's (and the base's, under None) HF + PEFT greedy tokens for `prompts`."""
    src, _, adapters = model
    out = {name: peft_greedy(src, path, prompts, NEW_TOKENS) for name, path in adapters.items()}
    out[None] = hf_greedy(src, prompts, NEW_TOKENS)
    assert all(out[name] != out[None] for name in adapters), "an adapter that changes nothing tests nothing"
    return out


def _llm(model, **kw) -> LLM:
    _, engine, adapters = model
    lora = {"adapters": {k: str(v) for k, v in adapters.items()}} | kw.pop("lora", {})
    return LLM(engine, lora=lora, kv_cache_memory=8 << 20, **kw)


def test_each_adapter_alone_equals_peft(model, prompts, expected):
    llm = _llm(model)
    for name in [*ADAPTERS, None]:
        got = llm.generate(prompts, P, adapter=name)
        assert [o.token_ids for o in got] == expected[name], name


def test_a_step_mixing_three_adapters_and_the_base_equals_each_alone(model, prompts, expected, monkeypatch):
    steps = []  # per step: the distinct adapters of its rows, and whether base rows ran beside them
    forward = decoder_module.DecoderModel.forward

    def spy(self, batch, kv, lora=None):
        names = {w.ref.name for _, _, w in lora.segments} if lora else set()
        covered = sum(e - s for s, e, _ in lora.segments) if lora else 0
        steps.append((names, covered < batch.token_ids.shape[0]))
        return forward(self, batch, kv, lora)

    monkeypatch.setattr(decoder_module.DecoderModel, "forward", spy)
    llm = _llm(model)
    names = [*ADAPTERS, None]
    batch = [p for p in prompts for _ in names]
    got = llm.generate(batch, P, adapter=[n for _ in prompts for n in names])
    for i, out in enumerate(got):
        assert out.token_ids == expected[names[i % len(names)]][i // len(names)], (i, names[i % len(names)])
    assert ({*ADAPTERS}, True) in steps  # one step ran rows of all three adapters and of the base


def test_max_loras_makes_other_adapters_wait_and_outputs_stay_exact(model, prompts, expected, monkeypatch):
    counts = []
    forward = decoder_module.DecoderModel.forward

    def spy(self, batch, kv, lora=None):
        counts.append(len(lora.adapters) if lora else 0)
        return forward(self, batch, kv, lora)

    monkeypatch.setattr(decoder_module.DecoderModel, "forward", spy)
    llm = _llm(model, lora={"max_loras": 1, "max_cpu_loras": 2})
    names = [*ADAPTERS, None]
    got = llm.generate(prompts[:2] * 4, P, adapter=[n for n in names for _ in range(2)])
    assert [o.token_ids for o in got] == [expected[n][j] for n in names for j in range(2)]
    assert max(counts) == 1  # never two adapters in one step
    cache = llm.core.lora.cache
    assert cache.active() == {}
    # Start: attn, all, mlp loaded (attn evicted); then attn (evicts all), all (evicts mlp), mlp (evicts
    # attn) each reloaded from its dir on demand.
    assert (cache.loads, cache.evictions) == (6, 4)
    assert [ref.name for ref in cache.resident()] == ["all", "mlp"]


def test_a_prefix_is_reused_within_an_adapter_and_never_across(model):
    src, _, adapters = model
    prompt = random_prompts(1, seed=9, lo=60, hi=61)[0]  # three full blocks of 16 before the last token
    want = {name: peft_greedy(src, path, [prompt], NEW_TOKENS)[0] for name, path in adapters.items()}
    want[None] = hf_greedy(src, [prompt], NEW_TOKENS)[0]
    llm = _llm(model)
    order = ["attn", "all", None, "all", "attn", None]
    outs = [llm.generate([prompt], P, adapter=name)[0] for name in order]
    assert [o.token_ids for o in outs] == [want[name] for name in order]
    # Runs 1-3 computed the whole prompt (another adapter's blocks, or the base's, are no hit); runs 4-6
    # found the three full blocks their own adapter cached before.
    assert [o.num_cached_tokens for o in outs] == [0, 0, 0, 48, 48, 48]


def test_deterministic_mode_with_adapters_is_exact_and_batch_invariant(model, prompts, expected):
    llm = _llm(model, deterministic=True)
    lp = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True, logprobs=2)
    alone = llm.generate(prompts[:1], lp, adapter="all")[0]
    assert alone.token_ids == expected["all"][0]
    mixed = llm.generate(prompts, lp, adapter=["all", "attn", None, "mlp"])[0]
    assert mixed.token_ids == alone.token_ids
    sig = [(x.logprob, tuple(x.top)) for x in alone.outputs[0].logprobs]
    assert [(x.logprob, tuple(x.top)) for x in mixed.outputs[0].logprobs] == sig  # bit for bit


def test_decode_rows_under_adapters_run_in_the_one_call_step(model, prompts, expected, monkeypatch):
    """decode_layers.c implements LoRA (STEP_FEATURES): decode steps mixing adapters and the base take it,
    and their tokens are PEFT's (the other tests pass through it too wherever it is built)."""
    assert "lora" in decode_layers.STEP_FEATURES
    calls = []
    run = decode_layers.run
    monkeypatch.setattr(decode_layers, "run", lambda *a, **k: calls.append(a[-1] is not None) or run(*a, **k))
    llm = _llm(model)
    if llm.engine.model.step_weights is None or decode_layers.load() is None:
        pytest.skip("the one-call decode step is not built here")
    got = llm.generate(prompts, P, adapter=["attn", "all", None, "mlp"])
    assert [o.token_ids for o in got] == [expected[n][i] for i, n in enumerate(["attn", "all", None, "mlp"])]
    assert calls.count(True) >= NEW_TOKENS - 1  # every decode step, with its adapters' rows


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_step_and_the_per_op_path_agree_on_adapter_rows(model, tmp_path, dtype):
    """Greedy tokens equal and logprobs within rounding: the C step's update sums in another order than
    the per-op path's addmm (float32), and in bfloat16 the per-op path's first step of a new set of
    adapters runs per segment (two roundings where the stacked addmm has one)."""
    import torch

    src, engine, adapters = model
    if dtype == "bfloat16":
        src = make_hf_model(tmp_path / "hf", "llama", seed=7, dtype=torch.bfloat16)
        engine = tmp_path / "engine"
        build_engine(BuildConfig(model=str(src), tokens_per_block=16), engine, quiet=True)
    llm = LLM(engine, lora={"adapters": {k: str(v) for k, v in adapters.items()}}, kv_cache_memory=8 << 20)
    model_ = llm.engine.model
    if model_.step_weights is None or decode_layers.load() is None:
        pytest.skip("the one-call decode step is not built here")
    two = random_prompts(2, seed=11)  # two rows: within the step's row limit in every dtype here
    lp = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=2)
    step = llm.generate(two, lp, adapter=["all", "mlp"])
    model_.step_lora = False
    per_op = llm.generate(two, lp, adapter=["all", "mlp"])
    tol = 1e-4 if dtype == "float32" else 0.125  # bfloat16: a couple of roundings of a logit of a few units
    for a, b in zip(step, per_op, strict=True):
        assert a.token_ids == b.token_ids
        for x, y in zip(a.outputs[0].logprobs, b.outputs[0].logprobs, strict=True):
            assert abs(x.logprob - y.logprob) <= tol


def test_adapters_that_do_not_fit_are_refused_in_one_sentence(model, tmp_path):
    src, engine, adapters = model
    other = make_hf_model(tmp_path / "other", "llama", seed=1, hidden_size=32, num_attention_heads=2)
    wrong_shape = make_lora_adapter(other, tmp_path / "wrong", ("q_proj",), 4, 8.0)
    embed = make_lora_adapter(src, tmp_path / "embed", ("q_proj", "embed_tokens"), 4, 8.0)
    cases = {
        "wrong": (wrong_shape, {}, "serve it on the base model it was trained for"),
        "embed": (embed, {}, "train it with target_modules among those"),
        "big": (adapters["all"], {"max_lora_rank": 4}, "raise the engine's lora.max_lora_rank to at least 8"),
        "missing": (tmp_path / "nowhere", {}, "give the dir PEFT's save_pretrained wrote"),
    }
    for name, (path, extra, fix) in cases.items():
        with pytest.raises(UserError) as err:
            LLM(engine, lora={"adapters": {name: str(path)}} | extra, kv_cache_memory=8 << 20)
        msg = str(err.value)
        assert fix in msg and "\n" not in msg, (name, msg)
    llm = _llm(model)
    with pytest.raises(UserError, match="no LoRA adapter named 'nope' is served; serving: all, attn, mlp"):
        llm.generate([[5, 6, 7]], P, adapter="nope")
    with pytest.raises(UserError, match="serves no LoRA adapters"):
        LLM(engine, kv_cache_memory=8 << 20).generate([[5, 6, 7]], P, adapter="attn")


def test_build_packs_adapters_into_the_engine_dir_pinned_by_the_manifest(model, prompts, expected, tmp_path):
    import json

    from click.testing import CliRunner

    from trtserve.cli import main

    src, _, adapters = model
    out = tmp_path / "engine"
    args = ["build", str(src), "-o", str(out), "--tokens-per-block", "16", "--quiet"]
    args += ["--lora", f"attn={adapters['attn']}", "--lora", f"mlp={adapters['mlp']}"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    files = json.loads((out / "manifest.json").read_text())["files"]
    assert {f for f in files if f.startswith("lora/")} == {
        f"lora/{n}/{f}" for n in ("attn", "mlp") for f in ("adapter_config.json", "adapter_model.safetensors")
    }
    llm = LLM(out, kv_cache_memory=8 << 20)  # served without the lora option
    for name in ("attn", "mlp", None):
        assert [o.token_ids for o in llm.generate(prompts, P, adapter=name)] == expected[name]
    with pytest.raises(UserError, match="packed in the engine dir and named again"):
        LLM(out, lora={"adapters": {"attn": str(adapters["all"])}}, kv_cache_memory=8 << 20)
    bad = CliRunner().invoke(main, [*args[:4], str(tmp_path / "e2"), "--lora", "attn"])
    assert bad.exit_code != 0 and "is not NAME=DIR" in bad.output
    other = make_hf_model(tmp_path / "other", "llama", seed=1, hidden_size=32, num_attention_heads=2)
    wrong = CliRunner().invoke(
        main, ["build", str(other), "-o", str(tmp_path / "e3"), "--lora", f"a={adapters['attn']}"]
    )
    assert wrong.exit_code != 0 and "serve it on the base model it was trained for" in wrong.output
    assert not (tmp_path / "e3").exists()  # nothing half-written
