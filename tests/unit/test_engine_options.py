"""The run-time engine options table: one typed value, its receipt identity, and per-option refusals."""

from __future__ import annotations

import pytest

from trtserve.engine import options as options_module
from trtserve.engine.backends import BACKENDS
from trtserve.engine.errors import UserError
from trtserve.engine.options import OPTIONS, EngineOptions, check_backend, check_requirements
from trtserve.engine.run_config import RuntimeConfig


def test_the_run_config_carries_the_options_flat_and_hands_them_on_as_one_value():
    cfg = RuntimeConfig.model_validate({"deterministic": True, "kv_cache_memory": "1MiB"})
    assert cfg.options == EngineOptions(deterministic=True)
    assert set(EngineOptions.model_fields) <= set(RuntimeConfig.model_fields)
    assert set(OPTIONS) == set(EngineOptions.model_fields)
    assert all(spec.backends <= set(BACKENDS) for spec in OPTIONS.values())  # names from engine/backends.py


def test_identity_holds_the_options_set_away_from_their_defaults():
    assert EngineOptions().identity() == {}
    both = EngineOptions(deterministic=True, int8_activations=True)
    assert both.identity() == {"deterministic": True, "int8_activations": True}
    assert EngineOptions(int8_activations=True).enabled() == {"int8_activations": True}


@pytest.mark.parametrize("backend", ["tensorrt", "trtllm"])
def test_an_option_the_backend_lacks_is_refused_naming_it_and_the_fix(backend):
    check_backend(EngineOptions(deterministic=True, int8_activations=True), "torch")
    check_backend(EngineOptions(), backend)
    with pytest.raises(UserError) as err:
        check_backend(EngineOptions(int8_activations=True), backend)
    message = str(err.value)
    assert f"engine option int8_activations ({OPTIONS['int8_activations'].summary})" in message
    assert f"not available on the {backend} backend (only torch)" in message
    assert message.endswith("remove `int8_activations` from the run config's engine section")
    with pytest.raises(UserError, match=f"engine option kv_cache_dtype .* not available on the {backend} backend"):
        check_backend(EngineOptions(kv_cache_dtype="float16"), backend)
    assert EngineOptions(kv_cache_dtype="float16").identity() == {"kv_cache_dtype": "float16"}  # a receipt's


def test_requirement_checks_run_for_enabled_options_only(monkeypatch):
    calls = []
    monkeypatch.setattr(options_module, "resolve", lambda ref: lambda model, value: calls.append((ref, model, value)))
    check_requirements(EngineOptions(deterministic=True), "model")
    assert calls == []  # deterministic names no requirement check, int8_activations is off
    check_requirements(EngineOptions(int8_activations=True), "model")
    assert calls == [(OPTIONS["int8_activations"].requires, "model", True)]
