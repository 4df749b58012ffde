"""LoRA adapters on TensorRT-LLM over the per-release fakes: the `lora_config` LLM argument (each
release's own LoraConfig class, which refuses unknown fields), a LoRARequest per request through
generate_async, adapters packed by `trtserve build --lora` for both workflows (trtllm-build's LoRA
flags on the TensorRT one), adapters loaded and unloaded at run time, and every refusal made before
anything reaches TensorRT-LLM."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from trtllm_fake import TENSORRT_RELEASES

from trtserve.build.builder import build_engine, dry_run
from trtserve.build.config import BuildConfig
from trtserve.engine.adapters import AdapterRef, LoraConfig
from trtserve.engine.errors import UnsupportedError, UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.protocol import Engine
from trtserve.engine.request_options import RequestOptions
from trtserve.engine.run_config import RuntimeConfig
from trtserve.engine.sampling import SamplingParams

VOCAB = 320
PROMPT = [5, 17, 42, 99, 7]
EVERY_MODULE = ["attn_q", "attn_k", "attn_v", "attn_dense", "mlp_h_to_4h", "mlp_gate", "mlp_4h_to_h"]
ATTENTION = ["attn_q", "attn_k", "attn_v", "attn_dense"]


def open_engine(path, **run):
    from trtserve.backends.tensorrt_llm.engine import TrtllmEngine

    return TrtllmEngine(path, RuntimeConfig(kv_cache_memory=1 << 20, **run))


@pytest.fixture
def lora_engine(fake_trtllm, trtllm_lora_dir):
    e = open_engine(trtllm_lora_dir)
    yield e
    e.shutdown()


def generate(engine, *requests):
    async def one(r):
        return [t for d in [d async for d in engine.generate(r)] for t in d.token_ids]

    async def run():
        return await asyncio.gather(*(one(r) for r in requests))

    return asyncio.run(run())


def req(adapter: AdapterRef | None = None, n: int = 6) -> GenerateRequest:
    return GenerateRequest(list(PROMPT), SamplingParams(max_tokens=n, temperature=0.0), RequestOptions(adapter=adapter))


def ref_of(engine, name: str) -> AdapterRef:
    [ref] = [r for r in engine.adapters() if r.name == name]
    return ref


def lora_config_class(tllm):
    """The release's LoraConfig: exported by llmapi on main, in lora_manager (lora_helper) in 1.0-1.2."""
    import importlib

    return getattr(tllm.llmapi, "LoraConfig", None) or importlib.import_module("tensorrt_llm.lora_manager").LoraConfig


# ---- the PyTorch workflow (--backend trtllm) ----------------------------------------------------------
@pytest.mark.parametrize("version", ["1.0", "1.2", "main"])
def test_dry_run_and_options_yaml_carry_lora_config(tiny_llama, adapters, trtllm_lora_dir, tmp_path, version):
    import yaml

    lora = {"sql": adapters["sql"], "chat": adapters["chat"]}
    cfg = BuildConfig(model=str(tiny_llama), backend="trtllm", lora=lora, trtllm_version=version)
    plan = yaml.safe_load(
        dry_run(cfg, tmp_path / "m")
        .split("LLM-API options (llm_api_options.yaml):\n")[1]
        .split("equivalent commands:")[0]
    )
    expected = {
        "lora_dir": ["lora/sql", "lora/chat"],  # relative to the engine dir, in --lora order
        "lora_target_modules": EVERY_MODULE,  # the PyTorch backend builds LoRA layers for each
        "max_lora_rank": 64,
        "max_loras": 4,
        "max_cpu_loras": 8,
    }
    assert plan["lora_config"] == expected
    written = yaml.safe_load((trtllm_lora_dir / "llm_api_options.yaml").read_text())
    assert written["lora_config"] == expected
    assert {p.name for p in (trtllm_lora_dir / "lora").iterdir()} == {"sql", "chat"}


def test_the_llm_gets_the_release_lora_config(lora_engine, fake_trtllm, trtllm_lora_dir):
    [llm] = fake_trtllm.INSTANCES
    lc = llm.kwargs["lora_config"]
    assert type(lc) is lora_config_class(fake_trtllm)
    assert lc.lora_dir == [str(trtllm_lora_dir / "lora" / "sql"), str(trtllm_lora_dir / "lora" / "chat")]
    assert (lc.lora_target_modules, lc.max_lora_rank, lc.max_loras, lc.max_cpu_loras) == (EVERY_MODULE, 64, 4, 8)
    assert lora_engine.info.capabilities.lora is True and isinstance(lora_engine, Engine)
    assert {r.name for r in lora_engine.adapters()} == {"sql", "chat"}


def test_each_request_reaches_generate_async_with_its_lora_request(lora_engine, fake_trtllm, trtllm_lora_dir):
    sql, chat = ref_of(lora_engine, "sql"), ref_of(lora_engine, "chat")
    base_out, sql_out, chat_out, sql_again = generate(lora_engine, req(), req(sql), req(chat), req(sql))
    [llm] = fake_trtllm.INSTANCES
    offsets = {n: fake_trtllm.adapter_offset(trtllm_lora_dir / "lora" / n, VOCAB) for n in ("sql", "chat")}
    assert base_out == fake_trtllm.reference_greedy(PROMPT, 6, VOCAB)
    assert sql_out == sql_again == fake_trtllm.reference_greedy(PROMPT, 6, VOCAB, offsets["sql"])
    assert chat_out == fake_trtllm.reference_greedy(PROMPT, 6, VOCAB, offsets["chat"])
    assert len({tuple(base_out), tuple(sql_out), tuple(chat_out)}) == 3
    lora_request = fake_trtllm.llmapi.LoRARequest
    assert all(type(r) is lora_request for r in llm.lora_requests)
    got = sorted((r.lora_name, r.lora_int_id, r.lora_path) for r in llm.lora_requests)
    sql_req = ("sql", 0, str(trtllm_lora_dir / "lora" / "sql"))  # packed first: ids in --lora order
    assert got == sorted([("chat", 1, str(trtllm_lora_dir / "lora" / "chat")), sql_req, sql_req])
    assert llm.adapters.loads == [0, 1] or llm.adapters.loads == [1, 0]  # each id read from disk once
    by = lora_engine.stats().adapters.by_adapter
    assert (by["sql"].requests, by["sql"].prompt_tokens, by["sql"].generated_tokens) == (2, 10, 12)
    assert by["chat"].requests == 1 and "base" not in by


def test_an_unknown_or_replaced_adapter_is_refused_before_the_llm(lora_engine, fake_trtllm):
    sql = ref_of(lora_engine, "sql")
    cases = [
        (AdapterRef("nope", sql.content_hash), "no LoRA adapter named nope is served; the served ones are chat, sql"),
        (dataclasses.replace(sql, content_hash="sha256:" + "0" * 64), "LoRA adapter sql is served with other contents"),
    ]
    for ref, message in cases:
        with pytest.raises(UserError, match=message):
            lora_engine.check(req(ref))
        with pytest.raises(UserError, match=message):
            generate(lora_engine, req(ref))
    [llm] = fake_trtllm.INSTANCES
    assert llm.lora_requests == [] and llm._next_id == 0  # nothing was submitted


def test_load_replace_and_unload_at_run_time(lora_engine, fake_trtllm, adapters):
    [llm] = fake_trtllm.INSTANCES
    extra = asyncio.run(lora_engine.load_adapter("extra", adapters["sql2"]))
    [out] = generate(lora_engine, req(extra))
    [r] = llm.lora_requests
    assert (r.lora_name, r.lora_int_id) == ("extra", 2) and r.lora_path != str(adapters["sql2"])  # a private copy
    assert out == fake_trtllm.reference_greedy(PROMPT, 6, VOCAB, fake_trtllm.adapter_offset(adapters["sql2"], VOCAB))

    old = ref_of(lora_engine, "sql")  # replaced by other weights under the same name: a new id, never 0 again
    new = asyncio.run(lora_engine.load_adapter("sql", adapters["sql2"]))
    assert new != old and new.content_hash == extra.content_hash
    with pytest.raises(UserError, match="served with other contents"):
        generate(lora_engine, req(old))
    [out2] = generate(lora_engine, req(new))
    assert out2 == out and llm.lora_requests[-1].lora_int_id == 3 and llm.adapters.loads == [2, 3]

    asyncio.run(lora_engine.unload_adapter("extra"))
    assert {r.name for r in lora_engine.adapters()} == {"sql", "chat"}
    with pytest.raises(UserError, match="no LoRA adapter named extra"):
        generate(lora_engine, req(extra))
    with pytest.raises(UserError, match="no LoRA adapter named extra"):
        asyncio.run(lora_engine.unload_adapter("extra"))
    with pytest.raises(UserError, match="has no adapter_config.json"):
        asyncio.run(lora_engine.load_adapter("x", adapters["sql2"].parent))
    assert lora_engine.stats().adapters.loads == 4  # sql, chat at start; extra; sql again


def test_an_engine_without_lora_serves_no_adapters(engine, fake_trtllm, adapters):
    [llm] = fake_trtllm.INSTANCES
    assert "lora_config" not in llm.kwargs and engine.info.capabilities.lora is False and engine.adapters() == []
    with pytest.raises(UnsupportedError, match="serves no LoRA adapters"):
        asyncio.run(engine.load_adapter("sql", adapters["sql"]))
    with pytest.raises(UserError, match="this engine serves no LoRA adapters .asked for sql."):
        engine.check(req(AdapterRef("sql", "sha256:" + "0" * 64)))


def test_the_run_options_lora_adds_adapters_to_a_plain_dir(fake_trtllm, trtllm_engine_dir, adapters):
    e = open_engine(
        trtllm_engine_dir, lora=LoraConfig(max_lora_rank=16, max_loras=2, adapters={"a": str(adapters["mlp"])})
    )
    try:
        [llm] = fake_trtllm.INSTANCES
        lc = llm.kwargs["lora_config"]
        assert (lc.max_lora_rank, lc.max_loras, lc.max_cpu_loras, lc.lora_target_modules) == (16, 2, 8, EVERY_MODULE)
        [path] = lc.lora_dir
        [out] = generate(e, req(ref_of(e, "a")))
        assert out == fake_trtllm.reference_greedy(PROMPT, 6, VOCAB, fake_trtllm.adapter_offset(path, VOCAB))
        with pytest.raises(UserError, match="LoRA adapter w has rank 16, above max_lora_rank 8"):
            open_engine(trtllm_engine_dir, lora=LoraConfig(max_lora_rank=8, adapters={"w": str(adapters["wide"])}))
    finally:
        e.shutdown()


def test_the_fakes_lora_classes_refuse_unknown_fields(fake_trtllm, release):
    with pytest.raises((TypeError, ValueError), match="max_adapters"):
        lora_config_class(fake_trtllm)(max_adapters=2)
    with pytest.raises(ValueError, match="does not exist"):
        fake_trtllm.llmapi.LoRARequest("a", 0, "/nonexistent/adapter")


@pytest.mark.parametrize("release", ["1.2"])
def test_a_release_lacking_a_lora_field_is_refused_in_one_sentence(fake_trtllm, trtllm_lora_dir, monkeypatch):
    import tensorrt_llm.lora_manager

    old = tensorrt_llm.lora_manager.LoraConfig
    fields = [(f.name, f.type, f) for f in dataclasses.fields(old) if f.name != "max_cpu_loras"]
    monkeypatch.setattr(tensorrt_llm.lora_manager, "LoraConfig", dataclasses.make_dataclass("LoraConfig", fields))
    with pytest.raises(UserError) as err:
        open_engine(trtllm_lora_dir)
    assert "has no LoraConfig field max_cpu_loras" in str(err.value) and "\n" not in str(err.value)
    assert fake_trtllm.INSTANCES == []


# ---- the TensorRT workflow (--backend tensorrt, trtllm-build with the LoRA plugin) ------------------
@pytest.fixture
def trt_lora_dir(fake_gpu, tiny_llama, adapters, tmp_path):
    cfg = BuildConfig(
        model=str(tiny_llama),
        backend="tensorrt",
        max_batch_size=8,
        lora={"sql": adapters["sql"], "chat": adapters["chat"]},
    )
    return build_engine(cfg, tmp_path / "trt", quiet=True).engine_dir


@pytest.mark.parametrize("release", TENSORRT_RELEASES)
def test_tensorrt_build_packs_the_adapters_as_task_ids(trt_lora_dir, adapters, fake_trtllm, tiny_llama, tmp_path):
    lora = {"sql": adapters["sql"], "chat": adapters["chat"]}
    plan = dry_run(BuildConfig(model=str(tiny_llama), backend="tensorrt", lora=lora), tmp_path / "t")
    flags = f"--lora_plugin float32 --lora_dir {adapters['sql']} {adapters['chat']} --max_lora_rank 8 "
    assert flags + "--lora_target_modules attn_q attn_k attn_v attn_dense" in plan
    build = json.loads((trt_lora_dir / "engine" / "config.json").read_text())["build_config"]
    assert build["plugin_config"]["lora_plugin"] == "float32"  # what the fake trtllm-build took from the flags
    recorded = build["lora_config"]
    assert (recorded["lora_dir"], recorded["max_lora_rank"]) == ([str(adapters["sql"]), str(adapters["chat"])], 8)
    assert recorded["lora_target_modules"] == ATTENTION

    e = open_engine(trt_lora_dir)
    try:
        [llm] = fake_trtllm.INSTANCES
        lc = llm.kwargs["lora_config"]
        assert (lc.lora_target_modules, lc.max_lora_rank, lc.max_loras) == (ATTENTION, 8, 4)
        sql_out, chat_out = generate(e, req(ref_of(e, "sql")), req(ref_of(e, "chat")))
        got = {(r.lora_name, r.lora_int_id, r.lora_path) for r in llm.lora_requests}
        assert got == {(n, i, str(trt_lora_dir / "lora" / n)) for i, n in enumerate(("sql", "chat"))}
        offset = fake_trtllm.adapter_offset(trt_lora_dir / "lora" / "chat", VOCAB)
        assert chat_out == fake_trtllm.reference_greedy(PROMPT, 6, VOCAB, offset)
        with pytest.raises(UserError, match="targets mlp_h_to_4h, mlp_gate, mlp_4h_to_h, which this TensorRT-LLM"):
            asyncio.run(e.load_adapter("mlp", adapters["mlp"]))
        with pytest.raises(UserError, match="LoRA adapter wide has rank 16, above max_lora_rank 8"):
            asyncio.run(e.load_adapter("wide", adapters["wide"]))
        ref = asyncio.run(e.load_adapter("sql2", adapters["sql2"]))  # fits the plugin: served as task id 2
        generate(e, req(ref))
        assert llm.lora_requests[-1].lora_int_id == 2
    finally:
        e.shutdown()


@pytest.mark.parametrize("release", ["1.2"])
def test_a_tensorrt_engine_without_the_lora_plugin_refuses_the_option(fake_gpu, tiny_llama, adapters, tmp_path):
    out = build_engine(BuildConfig(model=str(tiny_llama), backend="tensorrt"), tmp_path / "t", quiet=True).engine_dir
    with pytest.raises(UserError, match="was built without LoRA adapters, so its TensorRT engine has no LoRA plugin"):
        open_engine(out, lora=LoraConfig(adapters={"sql": str(adapters["sql"])}))
