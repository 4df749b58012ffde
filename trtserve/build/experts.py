"""Expert tensors read stacked. An HF checkpoint stores each expert's module on its own
(`model.layers.3.mlp.experts.17.gate_proj.weight`); a family names the role once with "{e}" in it
(models/moe.py), and the converter reads it as one (num_experts, out, in) tensor under that name
(`model.layers.3.mlp.experts.{e}.gate_proj.weight`), as llama.cpp stores it merged (`ffn_gate_exps`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from trtserve.engine.errors import UserError
from trtserve.models.family import DecoderFamily


class ExpertStacks:
    """A checkpoint's tensor names with each expert role's per-expert tensors as one stacked name."""

    def __init__(self, family: DecoderFamily, names: Iterable[str], shape: Callable[[str], tuple[int, ...]]):
        templates = [family.hf.layer_prefix + n for n in family.hf.layer.values() if "{e}" in n]
        patterns = [
            (re.compile(re.escape(t).replace(r"\{i\}", r"(\d+)").replace(r"\{e\}", r"(\d+)") + r"\.(\w+)$"), t)
            for t in templates
        ]
        groups: dict[str, dict[int, str]] = {}  # stacked name -> expert -> its tensor
        self._plain: list[str] = []
        for name in names:
            for regex, template in patterns:
                if m := regex.fullmatch(name):
                    stacked = template.format(i=int(m[1]), e="{e}") + "." + m[3]
                    groups.setdefault(stacked, {})[int(m[2])] = name
                    break
            else:
                self._plain.append(name)
        self.parts: dict[str, list[str]] = {}  # stacked name -> its experts' tensors, in expert order
        for stacked, experts in groups.items():
            missing = sorted(set(range(max(experts) + 1)) - experts.keys())
            if missing:
                raise UserError(
                    f"the checkpoint lacks expert tensor {stacked.format(e=missing[0])}; "
                    "the weights are incomplete or belong to another model"
                )
            parts = [experts[e] for e in range(len(experts))]
            shapes = {shape(p) for p in parts}
            if len(shapes) > 1:
                raise UserError(
                    f"the experts' tensors {stacked} differ in shape ({sorted(shapes)}); the checkpoint is corrupted"
                )
            self.parts[stacked] = parts

    def names(self) -> list[str]:
        return sorted(self._plain + list(self.parts))
