"""Adapters loaded, replaced and unloaded at run time (EngineCore.load_adapter / unload_adapter, what the
torch engine's thread runs between steps): requests already submitted finish on the weights they were
submitted under, token for token equal to HF transformers + PEFT; later ones get the new weights or are
refused; the adapter's requests and tokens are counted by name."""

from __future__ import annotations

import pytest
from helpers import hf_greedy, make_hf_model, make_lora_adapter, peft_greedy, random_prompts

from trtserve import LLM, SamplingParams
from trtserve.build.builder import build_engine
from trtserve.build.config import BuildConfig
from trtserve.engine.errors import UnsupportedError, UserError
from trtserve.engine.messages import GenerateRequest
from trtserve.engine.request_options import RequestOptions

pytest.importorskip("peft")

NEW_TOKENS = 12
P = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(engine dir, {name: adapter dir}, {name or None: greedy tokens of PROMPT}) of a tiny Llama."""
    d = tmp_path_factory.mktemp("lora-reload")
    src = make_hf_model(d / "hf", "llama", seed=5)
    build_engine(BuildConfig(model=str(src), tokens_per_block=16), d / "engine", quiet=True)
    adapters = {
        "a": make_lora_adapter(src, d / "a", ("q_proj", "v_proj", "down_proj"), 4, 8.0, seed=1),
        "b": make_lora_adapter(src, d / "b", ("k_proj", "o_proj", "up_proj"), 8, 16.0, seed=2),
    }
    want = {name: peft_greedy(src, path, PROMPTS, NEW_TOKENS) for name, path in adapters.items()}
    want[None] = hf_greedy(src, PROMPTS, NEW_TOKENS)
    return d / "engine", adapters, want


PROMPTS = random_prompts(2, seed=4)


def _run(core, reqs: list[GenerateRequest], between=None) -> dict:
    """Submit `reqs`, step until nothing is left (calling between(step) after each step); the tokens of
    every request that ran, by request id."""
    for r in reqs:
        core.add_request(r)
    out: dict = {r.request_id: [] for r in reqs}
    step = 0
    while core.has_unfinished():
        for d in core.step():
            assert d.error is None, d.error
            out.setdefault(d.request_id, []).extend(d.token_ids)
        step += 1
        if between is not None:
            between(step)
    return out


def test_a_replaced_adapter_finishes_its_submitted_requests_on_the_old_weights(model):
    engine, adapters, want = model
    llm = LLM(engine, lora={"adapters": {"x": str(adapters["a"])}}, kv_cache_memory=8 << 20)
    core = llm.core
    old = core.lora.ref("x")
    running = GenerateRequest(PROMPTS[0], P, RequestOptions(adapter=old))
    waiting = GenerateRequest(
        PROMPTS[1], P, RequestOptions(adapter=old)
    )  # resolved before the replacement, submitted after
    later: dict = {}

    def replace_after_the_first_step(step: int) -> None:
        if step == 1:
            new = core.lora.load("x", adapters["b"])
            assert new != old and core.lora.ref("x") == new
            later["new"] = GenerateRequest(PROMPTS[1], P, RequestOptions(adapter=new))
            for r in (waiting, later["new"]):
                core.add_request(r)

    got = _run(core, [running], replace_after_the_first_step)
    assert got[running.request_id] == want["a"][0]
    assert got[waiting.request_id] == want["a"][1]
    assert got[later["new"].request_id] == want["b"][1]
    # the old weights went once their last request finished; a request naming them now is refused
    assert old not in core.lora.cache.resident()
    with pytest.raises(UserError, match="now has other weights"):
        core.check(GenerateRequest(PROMPTS[0], P, RequestOptions(adapter=old)))
    counts = core.stats().adapters.by_adapter["x"]
    assert (counts.requests, counts.generated_tokens) == (3, 3 * NEW_TOKENS)


def test_an_unloaded_adapter_refuses_new_requests_and_finishes_running_ones(model):
    engine, adapters, want = model
    llm = LLM(engine, lora={"adapters": {"a": str(adapters["a"])}}, kv_cache_memory=8 << 20)
    core = llm.core
    ref = core.lora.ref("a")
    running = GenerateRequest(PROMPTS[0], P, RequestOptions(adapter=ref))
    base = GenerateRequest(PROMPTS[1], P)

    def unload(step: int) -> None:
        if step == 1:
            core.lora.unload("a")

    got = _run(core, [running, base], unload)
    assert got == {running.request_id: want["a"][0], base.request_id: want[None][1]}
    with pytest.raises(UserError, match="no LoRA adapter named 'a' is served; serving: none"):
        core.lora.ref("a")
    with pytest.raises(UserError, match="no LoRA adapter named 'a'"):
        core.lora.unload("a")
    assert core.lora.cache.resident() == []  # its weights went with its last request
    again = GenerateRequest(PROMPTS[0], P, RequestOptions(adapter=core.lora.load("a", adapters["a"])))  # loaded again
    assert _run(core, [again]) == {again.request_id: want["a"][0]}


def test_loads_that_do_not_fit_change_nothing(model, tmp_path):
    engine, adapters, _ = model
    llm = LLM(engine, lora={"adapters": {"a": str(adapters["a"])}, "max_lora_rank": 4}, kv_cache_memory=8 << 20)
    core = llm.core
    before = core.lora.ref("a")
    with pytest.raises(UserError, match="raise the engine's lora.max_lora_rank to at least 8") as err:
        core.lora.load("a", adapters["b"])  # rank 8 > 4: the served one stays
    assert "\n" not in str(err.value)
    assert core.lora.ref("a") == before and core.lora.refs() == [before]
    with pytest.raises(UserError, match="give the dir PEFT's save_pretrained wrote"):
        core.lora.load("c", tmp_path / "nowhere")
    with pytest.raises(UserError, match="is not usable as a model name"):
        core.lora.load("has space", adapters["a"])
    with pytest.raises(UnsupportedError, match="serves no LoRA adapters"):
        LLM(engine, kv_cache_memory=8 << 20).core.lora.load("a", adapters["a"])
