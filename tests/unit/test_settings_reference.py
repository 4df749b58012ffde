"""What the docs state stays what the code has: the template configs list every settings field and still
validate, the settings reference (rendered by docs/hooks/settings.py) has a row for every field, and the
architecture page's import table is the one tests/unit/test_imports.py enforces."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from trtserve.build.config import BuildConfig
from trtserve.engine.options import OPTIONS
from trtserve.engine.run_config import RuntimeConfig
from trtserve.serve.config import ServeConfig

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = {"configs/run-default.yaml": ServeConfig, "configs/build-template.yaml": BuildConfig}


def _hook():
    spec = importlib.util.spec_from_file_location("docs_settings_hook", ROOT / "docs/hooks/settings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _missing(data: dict, model: type[BaseModel], where: str = "") -> list[str]:
    """Fields of the model (and of its nested models' sections) that the YAML mapping lacks."""
    missing = []
    for name, info in model.model_fields.items():
        if name not in data:
            missing.append(where + name)
        elif isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            missing += _missing(data[name] or {}, info.annotation, f"{where}{name}.")
    return missing


@pytest.mark.parametrize("path", sorted(TEMPLATES))
def test_template_config_lists_every_setting(path):
    data = yaml.safe_load((ROOT / path).read_text())
    missing = _missing(data, TEMPLATES[path])
    assert not missing, f"{path} lacks {', '.join(missing)}: add each with its default and a comment"


@pytest.mark.parametrize("path", sorted(TEMPLATES))
def test_template_config_validates_with_the_defaults(path):
    model = TEMPLATES[path]
    loaded = model.model_validate(yaml.safe_load((ROOT / path).read_text()))
    assert loaded == model(), f"{path} sets a value other than the model's default"


def test_the_settings_reference_renders_every_field():
    hook = _hook()
    page = (ROOT / "docs/settings.md").read_text()
    rendered = hook.render(page)
    assert "<!--" not in rendered, "a settings marker on docs/settings.md was left unrendered"
    for model in (ServeConfig, RuntimeConfig, BuildConfig):
        assert f"{model.__module__}:{model.__name__}" in page, f"docs/settings.md has no table of {model.__name__}"
        table = hook.render_model(model)
        rows = [line for line in table.splitlines() if line.startswith("| <code>")]
        assert [r.split("</code>")[0].removeprefix("| <code>") for r in rows] == list(model.model_fields)
        assert table in rendered
    for name in OPTIONS:
        assert f"| <code>{name}</code> | {hook._cell(OPTIONS[name].summary)}" in rendered


def test_a_field_comment_is_found_beside_above_or_for_its_group():
    hook = _hook()
    assert hook.field_comment(ServeConfig, "drain_timeout") == "seconds in-flight requests get after SIGTERM"
    assert hook.field_comment(RuntimeConfig, "deterministic").startswith("bitwise-identical")  # inherited field
    assert "--kv-cache-quant" in hook.field_comment(BuildConfig, "kv_cache_quant")  # the block above `quant`
    assert hook.field_comment(RuntimeConfig, "capacity_policy").startswith("guaranteed_no_evict admits")  # block above
    assert hook.type_text(ServeConfig, "receipts") == "off | on | hashes"
    assert hook.type_text(ServeConfig, "port") == "int (≥ 0, ≤ 65535)"
    assert hook.default_text(RuntimeConfig, "kv_cache_cpu_memory") == "4GiB"


def test_the_architecture_page_states_the_import_rules_that_are_checked():
    spec = importlib.util.spec_from_file_location("import_rules", ROOT / "tests/unit/test_imports.py")
    rules = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rules)
    page = (ROOT / "docs/architecture.md").read_text()
    section = page.split("## Packages and who imports whom")[1].split("\n## ")[0]
    stated = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 3:
            pkg, may = cells[0].strip("`"), cells[1]
            stated[pkg] = None if may == "(anything)" else set() if may == "(nothing)" else set(may.split(", "))
    assert stated == rules.ALLOWED, "docs/architecture.md's import table differs from tests/unit/test_imports.py"
    for pkg in rules.ALLOWED:
        assert f" {pkg} -> " in page, f"the structure picture on docs/architecture.md has no box for {pkg}"
