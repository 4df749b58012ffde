"""Issue 54, the wave's capabilities mapped per TensorRT-LLM release: the adapter's tables (model_support.py,
feature_support.py) against the per-release fakes (facts.py: what each line's PyTorch backend loads, its
trtllm-serve options, generate_async's cache_salt), the docs table generated from them, and prefix reuse
after a wake-up on main. TensorRT-LLM itself does not run here: every test is against the fakes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from test_trtllm_engine import VOCAB, req
from trtllm_fake import RELEASES

from trtserve.backends.tensorrt_llm import capabilities, feature_support, model_support, support_doc
from trtserve.engine.errors import UserError

DOC = Path(__file__).parents[2] / "docs" / "tensorrt-llm.md"
# tiny checkpoints of the wave's families (transformers model_type -> config overrides)
FAMILIES = {
    "qwen3": dict(head_dim=32),
    "phi3": dict(partial_rotary_factor=0.75),
    "granite": dict(embedding_multiplier=12.0, logits_scaling=4.0),
    "smollm3": dict(num_hidden_layers=4),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": dict(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48
    ),
    "qwen3_moe": dict(head_dim=32, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32),
    "gpt_oss": dict(head_dim=16, num_local_experts=4, num_experts_per_tok=2),
}
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=None,
)


@pytest.fixture
def facts(fake_trtllm, release):
    from trtllm_fake_core.facts import FACTS

    return FACTS[release]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    import torch
    from helpers import write_tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM

    out = {}
    for model_type, overrides in FAMILIES.items():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **(COMMON | overrides)))
        dest = tmp_path_factory.mktemp(model_type) / "hf"
        model.save_pretrained(dest)
        write_tokenizer(dest)
        out[model_type] = dest
    return out


# ---- 1. models: the adapter's table is what each release's PyTorch backend loads ----------------------
def test_the_model_table_agrees_with_each_release(facts, release):
    for row in model_support.MODELS.values():
        assert (release in row.pytorch) is (row.architecture in facts.pytorch_models), (release, row.architecture)
        assert (release in row.mxfp4) is (row.architecture in facts.mxfp4_models), (release, row.architecture)


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_each_family_builds_for_the_releases_that_serve_it(fake_trtllm, release, checkpoints, model_type, tmp_path):
    """Served: `--backend trtllm` writes hf/ as is and the release's LLM loads and runs it. Not served: the
    build is refused in one sentence naming the release, and the release's own loader refuses it too."""
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig
    from trtserve.engine.open import open_engine

    src = checkpoints[model_type]
    arch = json.loads((src / "config.json").read_text())["architectures"][0]
    cfg = BuildConfig(model=str(src), backend="trtllm", max_batch_size=4, trtllm_version=release)
    if release not in model_support.MODELS[arch].pytorch:
        with pytest.raises(UserError, match=f"release line {release} cannot serve {arch}") as err:
            build_engine(cfg, tmp_path / "e", quiet=True)
        assert "\n" not in str(err.value) and not (tmp_path / "e").exists()
        with pytest.raises(ValueError, match=f"Unknown architecture for AutoModelForCausalLM: {arch}"):
            fake_trtllm.LLM(model=str(src))
        return
    engine = open_engine(build_engine(cfg, tmp_path / "e", quiet=True).engine_dir)
    try:
        [llm] = fake_trtllm.INSTANCES
        assert llm.model.endswith("/hf") and json.loads((Path(llm.model) / "config.json").read_text()) == json.loads(
            (src / "config.json").read_text()
        )
        got = [t for d in asyncio.run(_drain(engine.generate(req(max_tokens=3, temperature=0.0)))) for t in d.token_ids]
        assert len(got) == 3
    finally:
        engine.shutdown()


def test_serving_refuses_an_engine_dir_the_installed_release_cannot_load(
    fake_trtllm, release, tiny_llama, tmp_path, monkeypatch
):
    """An engine dir planned for another release than the installed one, of a model only that release
    serves (here the table is narrowed so Llama stands for such a model): one sentence, before TensorRT-LLM's
    own loader would fail."""
    import dataclasses

    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig
    from trtserve.engine.open import open_engine

    cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", max_batch_size=4, trtllm_version="main")
    out = build_engine(cfg, tmp_path / "e", quiet=True).engine_dir
    row = model_support.MODELS["LlamaForCausalLM"]
    monkeypatch.setitem(model_support.MODELS, row.architecture, dataclasses.replace(row, pytorch=frozenset({"main"})))
    if release == "main":
        open_engine(out).shutdown()
        return
    with pytest.raises(UserError, match=f"cannot be served here: .*release line {release} cannot serve Llama") as err:
        open_engine(out)
    assert "\n" not in str(err.value) and not fake_trtllm.INSTANCES


@pytest.mark.parametrize("release", ["1.0", "1.2"])
def test_the_tensorrt_backend_still_refuses_the_wave_families(checkpoints, release, tmp_path):
    """trtserve writes no unified checkpoint for them: the family refuses first, naming both backends."""
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    cfg = BuildConfig(model=str(checkpoints["qwen3_moe"]), backend="tensorrt", trtllm_version=release)
    with pytest.raises(
        UserError, match="backend tensorrt does not build qwen3_moe models yet; use --backend torch or trtllm"
    ):
        build_engine(cfg, tmp_path / "e", quiet=True)


@pytest.mark.parametrize("release", RELEASES)
def test_gpt_oss_and_mxfp4_per_release(fake_trtllm, release, tmp_path):
    """gpt-oss arrived in 1.1 with MXFP4 MoE weights (PR #6645): 1.0 refuses both, in the adapter and upstream."""
    caps = capabilities.planned(release)
    cfg = COMMON | {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss"}
    cfg["quantization_config"] = {"quant_method": "mxfp4"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    problem = model_support.model_problem(caps, "trtllm", ["GptOssForCausalLM"], "GptOssForCausalLM", "mxfp4")
    if release == "1.0":
        assert "release line 1.0 cannot serve GptOssForCausalLM" in problem
        with pytest.raises(ValueError, match="Unknown architecture"):
            fake_trtllm.LLM(model=str(tmp_path))
        return
    assert problem is None
    fake_trtllm.LLM(model=str(tmp_path)).shutdown()  # the release loads the MXFP4 checkpoint


def test_vision_is_refused_until_mapped_whatever_upstream_serves(facts, release):
    caps = capabilities.planned(release)
    for arch in ("LlavaForConditionalGeneration", "Idefics3ForConditionalGeneration", "Gemma3ForConditionalGeneration"):
        problem = model_support.model_problem(caps, "trtllm", [arch], None)
        assert problem.startswith(f"{arch} is a vision model") and f"release line {release}" in problem
    assert "Gemma3ForConditionalGeneration" in facts.pytorch_models  # upstream serves it multimodally
    assert feature_support.FEATURES["vision"].refused


@pytest.mark.parametrize("backend", ["trtllm", "tensorrt"])
def test_pooling_is_refused_at_build_in_one_sentence(tiny_llama, tmp_path, backend):
    """No release's trtllm-serve has an embeddings, rerank or classify route (feature_support.py "pooling")."""
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig

    with pytest.raises(
        UserError, match=f"pooling models are built for the torch backend only; leave out --backend {backend}"
    ) as err:
        build_engine(BuildConfig(model=str(tiny_llama), backend=backend, pooling="embed"), tmp_path / "e", quiet=True)
    assert "\n" not in str(err.value) and not (tmp_path / "e").exists()
    refused = {k for k, f in feature_support.FEATURES.items() if f.refused}
    assert refused == {"vision", "pooling"}  # the rest are served: above the engine, or as upstream has them


# ---- 4. parsers: our names as each release's trtllm-serve spells them, where it has one -----------------
@pytest.mark.parametrize("release", RELEASES)
def test_parser_flags_parse_with_each_releases_trtllm_serve(fake_trtllm, release):
    from click.testing import CliRunner
    from tensorrt_llm.commands import serve

    caps = capabilities.planned(release)
    flags = feature_support.parser_flags(caps, reasoning="deepseek_r1", tool="hermes")
    expected = ["--reasoning_parser", "deepseek-r1"] + (
        ["--tool_parser", "qwen3"] if release in ("1.2", "main") else []
    )
    assert flags == expected
    result = CliRunner().invoke(serve.main, ["/m", *flags])
    assert result.exit_code == 0, result.output
    assert feature_support.parser_flags(caps, reasoning="harmony", tool="pythonic") == []  # nothing upstream


# ---- 10. prefix reuse after a wake-up on main: the KV contents are gone, the reuse tree is not ----------
@pytest.mark.parametrize("release", ["main"])
@pytest.mark.parametrize("salted", [True, False], ids=["fixed", "undone"])
def test_no_request_reuses_a_block_a_sleep_emptied(fake_trtllm, tiny_llama, tmp_path, monkeypatch, salted):
    """Undone (no wake-up salt), the fake, as upstream, decodes from garbage KV after the wake-up."""
    from trtserve.backends.tensorrt_llm.sleep import Sleeper
    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig
    from trtserve.engine.open import open_engine

    if not salted:
        monkeypatch.setattr(Sleeper, "cache_salt", lambda self: None)
    cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", max_batch_size=8, trtllm_version="main")
    engine = open_engine(build_engine(cfg, tmp_path / "e", quiet=True).engine_dir)
    prompt = [(7 * i + 3) % VOCAB for i in range(70)]  # two full 32-token blocks
    try:
        [llm] = fake_trtllm.INSTANCES

        async def run():
            before = await _tokens(engine, prompt)
            await engine.sleep()
            await engine.wake_up()
            after = await _tokens(engine, prompt)
            again = await _tokens(engine, prompt)  # reuse resumes among post-wake requests
            return before, after, again

        before, after, again = asyncio.run(run())
        assert before == fake_trtllm.reference_greedy(prompt, 4, VOCAB)
        assert (after == before and again == before) is salted
        assert (llm.stale_requests == []) is salted
        assert llm.blocks.reused >= (2 if salted else 4)
    finally:
        engine.shutdown()


# ---- 7/8. doctor reports each row; the docs table is the adapter's -------------------------------------
@pytest.mark.parametrize("line", ["1.0", "main"])
def test_doctor_reports_every_row_for_the_planned_release(line):
    from click.testing import CliRunner

    from trtserve.cli.doctor import command

    result = CliRunner().invoke(command, ["--trtllm-version", line])
    assert result.exit_code == 0, result.output
    assert f"release line {line}" in result.output
    for row in feature_support.FEATURES.values():
        assert f"{row.name}: upstream: {row.upstream[line]}" in result.output
    for row in model_support.MODELS.values():
        assert row.architecture in result.output
    out = json.loads(CliRunner().invoke(command, ["--trtllm-version", line, "--json"]).output)
    assert {r["capability"] for r in out["capabilities"]["features"]} == {
        f.name for f in feature_support.FEATURES.values()
    }


def test_the_docs_table_is_generated_from_the_adapters_tables():
    text = DOC.read_text()
    start, end = text.index(support_doc.BEGIN), text.index(support_doc.END) + len(support_doc.END)
    assert text[start:end] == support_doc.markdown(), "regenerate: python -m trtserve.backends.tensorrt_llm.support_doc"


async def _tokens(engine, prompt: list[int]) -> list[int]:
    return [
        t for d in await _drain(engine.generate(req(prompt=prompt, max_tokens=4, temperature=0.0))) for t in d.token_ids
    ]


async def _drain(gen) -> list:
    return [d async for d in gen]


# ---- 9. tests/gpu/check_trtllm.py's new rows run on the fakes (the GPU host runs them for real) ---------
def test_the_gpu_scripts_wave_checks_run_on_every_fake(fake_trtllm, release, checkpoints, tiny_llama, tmp_path):
    import importlib.util

    from trtserve.build.builder import build_engine
    from trtserve.build.config import BuildConfig
    from trtserve.engine.open import open_engine

    path = Path(__file__).parents[1] / "gpu" / "check_trtllm_wave.py"
    spec = importlib.util.spec_from_file_location("check_trtllm_wave", path)
    wave = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wave)

    def build(src, out, backend):
        cfg = BuildConfig(model=str(src), backend=backend, max_batch_size=4, trtllm_version=release)
        return build_engine(cfg, out, quiet=True).engine_dir

    caps = capabilities.probe(fake_trtllm)
    for model_type in ("qwen3", "granite"):  # one served everywhere, one nowhere (AutoDeploy only)
        got = wave.check_wave_family(checkpoints[model_type], tmp_path / model_type, caps, build, open_engine, _ran)
        assert got == "ran" if model_type == "qwen3" else got.startswith("refused as the table says")
    engine = open_engine(build(tiny_llama, tmp_path / "llama", "trtllm"))
    try:
        assert "--reasoning_parser deepseek-r1" in wave.check_parser_flags(engine)

        class Skip(Exception):
            pass

        if release == "main":
            assert wave.check_wake_reuse(engine, Skip)
        else:
            with pytest.raises(Skip, match="no sleep|1.3 or later"):
                wave.check_wake_reuse(engine, Skip)
    finally:
        engine.shutdown()


def _ran(engine, src) -> str:
    return "ran"  # check_greedy compares with HF transformers on CUDA: the GPU host's part
