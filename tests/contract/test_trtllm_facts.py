"""Every release fake against its facts row (fake_trtllm/trtllm_fake_core/facts.py), and trtserve's own
release table (capabilities.RELEASES) against the same rows: a fake that drifts from the table, or an
adapter that plans for a release differently from what the table says, fails here."""

from __future__ import annotations

import importlib.util

import pydantic
import pytest
from trtllm_fake import RELEASES

from trtserve.backends.tensorrt_llm.capabilities import RELEASE_SPECIFIC_ARGS
from trtserve.backends.tensorrt_llm.capabilities import RELEASES as ADAPTER_RELEASES


@pytest.fixture
def facts(fake_trtllm, release):
    from trtllm_fake_core.facts import FACTS

    return FACTS[release]


def test_identity_and_backends(fake_trtllm, facts):
    assert fake_trtllm.__version__ == facts.version
    has_trt = importlib.util.find_spec("tensorrt_llm._tensorrt_engine") is not None
    assert has_trt is facts.tensorrt_backend is (importlib.util.find_spec("tensorrt_llm.commands.build") is not None)


def test_llm_args_fields_are_the_releases(fake_trtllm, facts):
    from tensorrt_llm.llmapi.llm_args import TorchLlmArgs
    from trtllm_fake_core.facts import FACTS

    fields = set(TorchLlmArgs.model_fields)
    others = {a for f in FACTS.values() for a in f.torch_args} - set(facts.torch_args)
    assert set(facts.torch_args) <= fields and not fields & others
    assert TorchLlmArgs.model_config["extra"] == "forbid"
    with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
        TorchLlmArgs(model="m", **{next(iter(others)): True})


def test_kv_cache_config_fields_and_ranges(fake_trtllm, facts):
    from trtllm_fake_core.facts import KV_CACHE_RANGES

    kv = fake_trtllm.llmapi.KvCacheConfig
    assert set(kv.model_fields) == set(facts.kv_cache_fields)  # main: no onboard_blocks (PR #12449)
    for name, low, high in KV_CACHE_RANGES:
        for bad in (low, high):
            with pytest.raises(ValueError, match=name):
                kv(**{name: bad})
    with pytest.raises(pydantic.ValidationError):
        kv(host_cache_bytes=1)  # extra="forbid"


def test_sampling_params_checks(fake_trtllm, facts):
    sp = fake_trtllm.SamplingParams
    for field, bad in (("top_p", 1.5), ("top_k", -1), ("temperature", -0.5)):
        if facts.sampling_range_checks:
            with pytest.raises(ValueError, match=f"require .*{field}"):
                sp(**{field: bad})
        else:
            sp(**{field: bad})
    with pytest.raises(TypeError, match="unexpected keyword"):
        sp(no_such_field=1)
    greedy_temperature_only = sp(temperature=0.0, top_p=0.9)._greedy_decoding  # 1.0 ignores temperature
    assert greedy_temperature_only is (facts.greedy_rule == "implied")


def test_llmapi_exports(fake_trtllm, facts):
    assert all(hasattr(fake_trtllm.llmapi, name) for name in facts.llmapi_exports)
    g = fake_trtllm.llmapi.GuidedDecodingParams(json_object=True)
    assert g.json_object and g.regex is None
    with pytest.raises(ValueError, match="Only one guided decoding parameter"):
        fake_trtllm.llmapi.GuidedDecodingParams(regex="a", grammar="root ::= x")


def test_trtllm_serve_parses_every_option_under_every_name(fake_trtllm, facts):
    from tensorrt_llm.commands.serve import main
    from trtllm_fake_core.serve_cli import PARSED

    for dest, (names, kind, _) in facts.serve_options.items():
        for name in names:
            value = [] if kind is bool else [{int: "3", float: "0.5", str: "x"}[kind]]
            main.main(args=["M", name, *value], standalone_mode=False)
            assert PARSED[-1][dest] == ({int: 3, float: 0.5, str: "x", bool: True}[kind])
    for alias, choice in facts.serve_aliases.items():
        main.main(args=["M", "--backend", alias], standalone_mode=False)
        assert PARSED[-1]["backend"] == choice
    with pytest.raises(Exception, match="No such option"):
        main.main(args=["M", "--no_such_option", "1"], standalone_mode=False)


@pytest.mark.parametrize("release", RELEASES)
def test_the_adapters_release_table_says_what_the_facts_say(release):
    import importlib.util as util
    import sys

    from trtllm_fake import FAKE_PATH

    spec = util.spec_from_file_location("fake_facts", FAKE_PATH / "trtllm_fake_core" / "facts.py")
    module = util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    facts, row = module.FACTS[release], ADAPTER_RELEASES[release]
    assert row.tensorrt_backend is facts.tensorrt_backend
    assert set(row.serve_backends) == set(facts.serve_backends) | set(facts.serve_aliases)
    assert row.torch_args == set(facts.torch_args) & RELEASE_SPECIFIC_ARGS
    assert row.torch_logprobs == facts.torch_logprobs
    assert (row.spec_iteration_stats, row.spec_request_metrics) == (
        facts.spec_iteration_stats,
        facts.spec_request_metrics,
    )
    from trtserve.backends.tensorrt_llm.capabilities import from_table

    assert from_table(release, None, "table").sleep_arg == facts.sleep_arg
