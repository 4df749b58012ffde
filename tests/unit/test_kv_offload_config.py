"""The `kv_offload` option's plumbing without a model: `--kv-offload` merged over the run config, the
server's default directory per model version, and moving weights by storage (the engine's sleep)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trtserve.cli.kv_offload import with_kv_offload
from trtserve.engine.errors import UserError
from trtserve.engine.kv_offload import KVOffloadConfig
from trtserve.runtime import weights
from trtserve.serve.config import ServeConfig
from trtserve.serve.kv_offload import with_tier_path


def test_the_flag_sets_the_budget_over_the_config():
    cfg = ServeConfig()
    assert with_kv_offload(cfg, None) is cfg
    assert with_kv_offload(cfg, "8GiB").engine.kv_offload == KVOffloadConfig(bytes=8 << 30)
    base = cfg.model_copy(
        update={"engine": cfg.engine.model_copy(update={"kv_offload": KVOffloadConfig(bytes=1, path="/t")})}
    )
    merged = with_kv_offload(base, "2MiB").engine.kv_offload
    assert merged.bytes == 2 << 20 and merged.path == Path("/t")  # the config's other fields stay
    for bad in ("lots", "0", "-1GiB"):
        with pytest.raises(UserError, match=r"--kv-offload .* is not a size above 0; give bytes such as 8GiB"):
            with_kv_offload(cfg, bad)


def test_the_server_puts_each_version_s_tier_under_its_state_dir(tmp_path):
    run = ServeConfig().engine
    assert with_tier_path(run, tmp_path, "m", 1) is run  # no tier: nothing to place
    run = run.model_copy(update={"kv_offload": KVOffloadConfig(bytes=1 << 20)})
    assert with_tier_path(run, None, "m", 1).kv_offload.directory is None  # --state-dir none: a temporary file
    placed = with_tier_path(run, tmp_path, "org/model x", 3).kv_offload
    assert placed.directory == tmp_path / "org_model_x" / "3" and placed.path is None
    own = run.model_copy(update={"kv_offload": KVOffloadConfig(bytes=1 << 20, path=tmp_path / "mine")})
    assert with_tier_path(own, tmp_path, "m", 1).kv_offload.directory == tmp_path / "mine"  # the user's wins


def test_weights_move_by_storage_and_tied_views_stay_tied():
    class Layer:
        __module__ = "trtserve.models.decoder"

        def __init__(self):
            self.w = torch.randn(4, 4)
            self.parts = [torch.randn(2), (torch.randn(3), 1)]

    class Model:
        __module__ = "trtserve.models.decoder"

        def __init__(self):
            self.embed = torch.randn(10, 4)
            self.lm_head = self.embed[:8]  # a view of the embedding, as a tied lm_head is
            self.layers = [Layer(), Layer()]

    m = Model()
    before = [m.embed.clone(), m.layers[1].parts[1][0].clone()]
    weights.move(m, lambda s: s.clone())  # a copy stands in for the trip to host memory
    assert torch.equal(m.embed, before[0]) and torch.equal(m.layers[1].parts[1][0], before[1])
    assert m.lm_head.untyped_storage().data_ptr() == m.embed.untyped_storage().data_ptr()
    m.embed[0, 0] = 123.0
    assert m.lm_head[0, 0] == 123.0
