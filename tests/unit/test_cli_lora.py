"""`--lora NAME=DIR` on `trtserve build` and `trtserve run`: parsed once, and on `run` merged into the run
config's `lora` engine option (its other settings kept, a name given twice refused)."""

from __future__ import annotations

import click
import pytest

from trtserve.cli.lora import adapters
from trtserve.cli.run import with_adapters
from trtserve.engine.errors import UserError
from trtserve.serve.config import ServeConfig


def test_flags_parse_to_names_and_dirs():
    assert adapters(("sql=./a", "chat=/b=c")) == {"sql": "./a", "chat": "/b=c"}
    assert adapters(()) is None
    with pytest.raises(click.BadParameter, match="'sql' is not NAME=DIR"):
        adapters(("sql",))
    with pytest.raises(click.BadParameter, match="adapter name sql is given twice"):
        adapters(("sql=a", "sql=b"))


def test_run_adds_them_to_the_lora_engine_option():
    cfg = ServeConfig.model_validate(
        {"engine": {"deterministic": True, "lora": {"max_lora_rank": 8, "adapters": {"a": "/a"}}}}
    )
    got = with_adapters(cfg, {"b": "/b"})
    assert got.engine.lora.adapters == {"a": "/a", "b": "/b"} and got.engine.lora.max_lora_rank == 8
    assert got.engine.deterministic and cfg.engine.lora.adapters == {"a": "/a"}  # the given config unchanged
    assert with_adapters(ServeConfig(), {"b": "/b"}).engine.lora.adapters == {"b": "/b"}  # the option made
    with pytest.raises(UserError, match="adapter a is in the run config's engine.lora.adapters and given to --lora"):
        with_adapters(cfg, {"a": "/other"})
    with pytest.raises(UserError, match="--lora: adapter name 'a b' is not usable as a model name") as err:
        with_adapters(cfg, {"a b": "/b"})
    assert "\n" not in str(err.value)
