"""LoRA adapters as models of the repository (serve/repository/adapters.py), on plain values: which
versions serve which adapter, routing an adapter's name to its base's version under a bound service,
the index entries, and the names an adapter may not take."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trtserve.engine.adapters import AdapterRef
from trtserve.engine.errors import UserError
from trtserve.serve.errors import APIError
from trtserve.serve.repository import adapters as lora
from trtserve.serve.repository.model import RepoModel
from trtserve.serve.repository.version import ModelVersion, State

A = AdapterRef("sql", "sha256:" + "a" * 64)
B = AdapterRef("chat", "sha256:" + "b" * 64)


@dataclass
class _Caps:
    lora: bool


@dataclass
class _Info:
    capabilities: _Caps


@dataclass
class _Engine:
    """What the repository reads of an engine here: health, capabilities and its adapters."""

    refs: list[AdapterRef] = field(default_factory=list)
    lora: bool = True

    def __post_init__(self):
        self.info = _Info(_Caps(self.lora))

    def health(self) -> bool:
        return True

    def adapters(self) -> list[AdapterRef]:
        return list(self.refs)


@dataclass
class _Service:
    model_name: str
    adapter: AdapterRef | None = None

    def under(self, ref: AdapterRef) -> _Service:
        return _Service(ref.name, ref)


def _models(**engines: dict[int, _Engine]) -> dict[str, RepoModel]:
    out = {}
    for name, versions in engines.items():
        mvs = {}
        for v, engine in versions.items():
            mv = ModelVersion(name, v, Path(f"/r/{name}/{v}"), State.READY, served_model=engine)
            mv.service = _Service(name)
            mvs[v] = mv
        out[name] = RepoModel(name, None, mvs)
    return out


def test_adapters_are_found_on_the_ready_versions_that_serve_them():
    models = _models(base={1: _Engine([A]), 2: _Engine([A, B])}, other={1: _Engine(lora=False)})
    assert [(mv.name, ref.name) for mv, ref in lora.served(models)] == [
        ("base:1", "sql"),
        ("base:2", "sql"),
        ("base:2", "chat"),
    ]
    assert lora.base_of(models, "chat").name == "base"
    assert lora.base_of(models, "base") is None and lora.base_of(models, "nope") is None
    models["base"].versions[2].state = State.UNLOADING  # a draining version's adapters are not routed to
    assert lora.base_of(models, "chat") is None
    assert [e["name"] for e in lora.index_entries(models)] == ["sql"]
    assert lora.index_entries(models)[0] == {
        "name": "sql",
        "version": "1",
        "state": "READY",
        "reason": "LoRA adapter on base",
    }


def test_bind_answers_as_the_adapter_and_leaves_the_version_alone():
    models = _models(base={1: _Engine([A])})
    mv = models["base"].versions[1]
    bound = lora.bind(mv, "sql")
    assert bound.service.adapter == A and bound.service.model_name == "sql"
    assert (bound.model, bound.version, bound.recent is mv.recent) == ("base", 1, True)
    assert mv.service.adapter is None  # the version's own service is unchanged
    with pytest.raises(APIError, match="model 'chat' is not served by base:1") as err:
        lora.bind(mv, "chat")
    assert err.value.status == 404


def test_an_adapter_may_not_take_a_model_name_or_another_base_adapter():
    models = _models(base={1: _Engine([A])}, other={1: _Engine([])})
    with pytest.raises(UserError, match="adapter name 'other' is a model this server serves"):
        lora.check_name(models, "other", "base")
    with pytest.raises(UserError, match="adapter 'sql' is already served on model 'base'"):
        lora.check_name(models, "sql", "other")
    lora.check_name(models, "sql", "base")  # replacing it on its own base is fine
    lora.check_name(models, "new", "other")
