"""docs/building.md's family table says what the family registry holds: one row per family, naming
its HF architectures, its GGUF architecture, the backends and the quant formats it builds with."""

from __future__ import annotations

from pathlib import Path

from trtserve.models import registry

DOC = Path(__file__).parents[2] / "docs" / "building.md"


def _rows() -> dict[str, list[str]]:
    section = DOC.read_text().split("## Supported models", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells] for cells in rows[1:]}


def test_the_docs_table_has_a_true_row_per_family():
    rows = _rows()
    families = registry._FAMILIES.values()
    assert set(rows) == {fam.name for fam in families}
    for fam in families:
        _, hf, gguf, _, backends, quant = rows[fam.name]
        assert hf == ", ".join(f"`{a}`" for a in fam.hf_architectures), fam.name
        # no GGUF names: llama.cpp writes the family as llama (read as llama), or its files are not read
        assert gguf == f"`{fam.gguf.arch}`" if fam.gguf else gguf in ("(written as `llama`)", "not read"), fam.name
        assert backends == ("all" if fam.backends is None else ", ".join(sorted(fam.backends))), fam.name
        assert quant == ("all" if fam.quant_formats is None else ", ".join(sorted(fam.quant_formats)) or "none")
