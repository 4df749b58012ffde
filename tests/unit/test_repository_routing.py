"""The repository's router, KV budget and guard, on plain values (no engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtserve.engine.errors import UserError
from trtserve.engine.run_config import RuntimeConfig
from trtserve.serve.errors import APIError
from trtserve.serve.repository.admin import version_parameter
from trtserve.serve.repository.budget import KVBudget
from trtserve.serve.repository.guard import parse_rules, verdict
from trtserve.serve.repository.model import RepoModel
from trtserve.serve.repository.policy import Policy
from trtserve.serve.repository.router import Target, parse_target, sticky_point, weighted_choice
from trtserve.serve.repository.scan import scan_versions
from trtserve.serve.repository.version import ModelVersion, Outcome, State


class _Healthy:
    def health(self) -> bool:
        return True


def _model(states: dict[int, State], name: str = "m", **policy) -> RepoModel:
    versions = {}
    for v, state in states.items():
        mv = ModelVersion(name, v, Path(f"/r/{name}/{v}"), state)
        mv.served_model = _Healthy() if state == State.READY else None
        versions[v] = mv
    return RepoModel(name, None, versions, Policy.model_validate(policy))


def test_parse_target_forms():
    assert parse_target("m") == Target("m")
    assert parse_target("m:3") == Target("m", 3)
    assert parse_target("m@canary") == Target("m", label="canary")
    assert parse_target("org/m:v2") == Target("org/m:v2")  # not a version: part of the name
    assert parse_target("m", "2") == Target("m", 2)
    with pytest.raises(APIError) as e:
        parse_target("m:1", "2")
    assert e.value.status == 400
    with pytest.raises(APIError) as e:
        parse_target("m", "x")
    assert e.value.status == 404


@pytest.mark.parametrize("digits", ["\u00b2", "\u0663", "\uff13"])  # superscript 2, Arabic-Indic 3, fullwidth 3
def test_non_ascii_digits_are_not_versions(tmp_path, digits):
    """str.isdigit says yes to them, int() refuses some (a fuzzed KServe path gave a 500)."""
    assert parse_target(f"m:{digits}") == Target(f"m:{digits}")
    with pytest.raises(APIError) as e:
        parse_target("m", digits)
    assert e.value.status == 404
    with pytest.raises(APIError) as e:
        version_parameter({"version": digits})
    assert e.value.status == 400
    (tmp_path / "m" / digits).mkdir(parents=True)
    (tmp_path / "m" / "2").mkdir()
    assert list(scan_versions(tmp_path / "m")) == [2]


def test_weighted_choice_cuts_ranges_in_version_order():
    w = {2: 25.0, 1: 75.0}
    assert [weighted_choice(w, p) for p in (0.0, 0.7499, 0.75, 0.9999)] == [1, 1, 2, 2]
    assert weighted_choice({1: 0.0, 2: 1.0}, 0.0) == 2
    assert sticky_point("alice") == sticky_point("alice") != sticky_point("bob")
    assert 0.0 <= sticky_point("alice") < 1.0


def test_split_by_keys_matches_weights():
    w = {1: 90.0, 2: 10.0}
    picks = [weighted_choice(w, sticky_point(f"user-{i}")) for i in range(4000)]
    assert 300 < picks.count(2) < 500  # 400 expected; sd 19


def test_route_never_picks_a_version_that_is_not_ready():
    m = _model({1: State.READY, 2: State.LOADING}, labels={"stable": 1}, weights={1: 50, 2: 50})
    assert {m.route(Target("m"), f"k{i}")[0].version for i in range(50)} == {1}
    for target in (Target("m", 2), Target("m", label="nope"), Target("m", 9)):
        with pytest.raises(APIError) as e:
            m.route(target, None)
        assert e.value.status == (503 if target.version == 2 else 404)
    assert m.route(Target("m", label="stable"), None) == (m.versions[1], "label")
    down = _model({1: State.UNAVAILABLE})
    with pytest.raises(APIError) as e:
        down.route(Target("m"), None)
    assert e.value.status == 503 and e.value.headers == {"Retry-After": "2"}


def test_policy_change_and_rollback_restore_the_previous_routing():
    p = Policy.model_validate({"labels": {"stable": 1}})
    p = p.change({"stable": 1, "canary": 2}, {1: 90, 2: 10})
    p = p.change({"stable": 2}, {})
    assert p.rolled_back().labels == {"stable": 1, "canary": 2} and p.rolled_back().weights == {1: 90, 2: 10}
    assert p.rolled_back().rolled_back().labels == {"stable": 1}
    with pytest.raises(UserError):
        Policy().rolled_back()
    with pytest.raises(ValueError):
        Policy.model_validate({"version_policy": {"latest": 2, "all": True}})
    assert Policy.model_validate({"version_policy": {"specific": [1, 3]}}).version_policy.select([1, 2, 3]) == [1, 3]
    assert Policy().version_policy.select([3, 1, 2]) == [3]


def test_policy_persists_atomically_and_reads_back(tmp_path):
    from trtserve.serve.repository.policy import read_policy, write_policy

    p = Policy.model_validate({"labels": {"stable": 1}}).change({"stable": 1, "canary": 2}, {1: 75, 2: 25})
    write_policy(tmp_path, p)
    assert read_policy(tmp_path) == p
    assert [f.name for f in tmp_path.iterdir()] == ["policy.yaml"]  # no temp file left behind
    assert "1: 75.0" in (tmp_path / "policy.yaml").read_text()
    (tmp_path / "policy.yaml").write_text("labels: {stable: one}\n")
    with pytest.raises(UserError, match="labels.stable"):
        read_policy(tmp_path)


def test_kv_budget_refuses_a_load_that_does_not_fit_and_says_what_is_loaded():
    models = {"a": _model({1: State.READY, 2: State.UNKNOWN}, "a"), "b": _model({1: State.UNKNOWN}, "b")}
    budget = KVBudget(RuntimeConfig(kv_cache_memory="64MiB"), models, single=False)
    assert int(budget.reserve(models["a"].versions[1]).kv_cache_memory) == 16 << 20  # 64 MiB / (2 * 2 models)
    budget.reserve(models["a"].versions[2])
    budget.reserve(models["b"].versions[1])
    models["b"].policy = Policy.model_validate({"kv_cache_memory": "32MiB"})
    extra = ModelVersion("b", 2, Path("/r/b/2"))
    models["b"].versions[2] = extra
    with pytest.raises(UserError, match=r"needs 32 MiB but only 16 MiB of the 64 MiB .*loaded: a:1 16 MiB"):
        budget.reserve(extra)
    assert extra.kv_bytes == 0 and budget.used() == 48 << 20  # nothing changed
    budget.release(models["a"].versions[1])
    assert budget.used() == 32 << 20


def test_guard_rules_and_verdicts():
    rules = parse_rules("error_rate<0.01, p95_ttft<1.5x")
    ok = [Outcome(True, 0.1)] * 10
    assert verdict(rules, ok, ok) is None
    failing = ok[:9] + [Outcome(False, None)]
    assert verdict(rules, failing, ok).startswith("error_rate<0.01: the canary's error_rate is 0.1")
    slow = [Outcome(True, 0.2)] * 10
    assert verdict(rules, slow, ok).startswith("p95_ttft<1.5x")
    assert verdict(rules, slow, []) is None  # nothing to compare with yet
    assert verdict(parse_rules("p95_ttft<0.15"), slow, []).startswith("p95_ttft<0.15")
    for bad in ("latency<3", "error_rate<2x", "p95_ttft>1"):
        with pytest.raises(UserError):
            parse_rules(bad)
