"""HF-named checkpoint -> TensorRT-LLM unified checkpoint (per TP rank) and torch-engine weights.

The conversion is a plan of `TensorSpec`s built from the model config and the reader's family
spec alone (models/layout.py: every name, shape, fusion and TP cut is the spec's): every source
tensor is named, its shape asserted against config.json, and used by exactly one output (a tied
lm_head, the embedding again, is the one named exception). Producing the tensors happens later,
one at a time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import torch

from trtserve.build.reader import CheckpointReader
from trtserve.build.safetensors_io import TensorSpec
from trtserve.engine.errors import UserError
from trtserve.engine.model_config import ModelConfig
from trtserve.models.dtypes import TORCH_DTYPES
from trtserve.models.family import DecoderFamily
from trtserve.models.layout import EMBED, LM_HEAD, Source, Split, Target

# Source tensors that hold no weights (recomputed at load time by every runtime).
_IGNORABLE_SUFFIXES = ("rotary_emb.inv_freq",)


def _source_modules(fam: DecoderFamily, cfg: ModelConfig, has_lm_head: bool) -> Iterator[tuple[str, Source]]:
    """Every source module the config implies, by its family name."""
    for role, src in fam.layout.model.items():
        if role != LM_HEAD or has_lm_head or not cfg.tie_word_embeddings:
            yield fam.hf.module(role), src
    for i in range(cfg.num_hidden_layers):
        for role, src in fam.layout.layer_roles(cfg, i).items():
            yield fam.hf.module(role, i), src


def expected_source_shapes(fam: DecoderFamily, cfg: ModelConfig, has_lm_head: bool) -> dict[str, tuple[int, ...]]:
    """Every source tensor the config implies, with its shape ([out, in] for linears); a module the
    checkpoint stores fused (Names.fused) has its roles' out rows added up."""
    features = fam.features_of(cfg)
    shapes: dict[str, tuple[int, ...]] = {}
    for module, src in _source_modules(fam, cfg, has_lm_head):
        for name, shape in [(module + ".weight", src.weight_shape(cfg))] + (
            [(module + ".bias", src.weight_shape(cfg)[:-1])] if src.bias in features else []
        ):
            if name in shapes:  # another role of a fused module: rows [fused so far; this role's]
                assert shapes[name][1:] == shape[1:], f"the parts of {name} differ in their in dims"
                shape = (shapes[name][0] + shape[0], *shape[1:])
            shapes[name] = shape
    return shapes


def _use(name: str, rows: slice | None) -> str:
    """How the plan names one use of a source tensor: the tensor, or a fused one's out rows."""
    return name if rows is None else f"{name}[{rows.start}:{rows.stop}]"


def source_uses(fam: DecoderFamily, cfg: ModelConfig, expected: dict[str, tuple[int, ...]]) -> list[str]:
    """What the plan must use exactly once: every source tensor, a fused one as each of its roles' rows
    (which tile it: `Names.rows` stacks them in order, and their sum is the shape checked)."""
    uses = {name: [name] for name in expected}
    for i in range(cfg.num_hidden_layers):
        for fused, roles in fam.hf.fused.items():
            module = fam.hf.layer_prefix.format(i=i) + fused
            for suffix in ("weight", "bias"):
                if f"{module}.{suffix}" in expected:
                    rows = [fam.hf.rows(r, fam.layout, cfg) for r in roles]
                    uses[f"{module}.{suffix}"] = [_use(f"{module}.{suffix}", r) for r in rows]
    return [u for us in uses.values() for u in us]


def check_source(reader: CheckpointReader, cfg: ModelConfig) -> list[str]:
    """Assert the checkpoint holds exactly the tensors the config implies, with those shapes; returns
    the uses a conversion plan must make of them, each once (`source_uses`)."""
    names = [n for n in reader.names() if not n.endswith(_IGNORABLE_SUFFIXES)]
    has_lm_head = reader.family.hf.module(LM_HEAD) + ".weight" in names
    expected = expected_source_shapes(reader.family, cfg, has_lm_head)
    missing = sorted(set(expected) - set(names))
    if missing:
        raise UserError(
            f"the checkpoint lacks {len(missing)} tensor(s) its config implies, e.g. {missing[0]}; "
            "the weights are incomplete or belong to another model"
        )
    extra = sorted(set(names) - set(expected))
    if extra:
        raise UserError(
            f"the checkpoint has {len(extra)} tensor(s) a {cfg.architecture} with this config does not use, e.g. {extra[0]}; "
            f"check that {reader.config_origin} matches the weights"
        )
    for name, shape in expected.items():
        got = reader.shape(name)
        if got != shape:
            raise UserError(
                f"tensor {name} has shape {list(got)} but {reader.config_origin} implies {list(shape)}; "
                "the config and weights do not match"
            )
    return source_uses(reader.family, cfg, expected)


def check_tp(cfg: ModelConfig, tp: int) -> None:
    kv = cfg.num_key_value_heads
    problems = []
    if cfg.num_attention_heads % tp:
        problems.append(f"num_attention_heads {cfg.num_attention_heads}")
    if cfg.intermediate_size % tp:
        problems.append(f"intermediate_size {cfg.intermediate_size}")
    if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
        problems.append(f"num_key_value_heads {kv}")
    if problems:
        raise UserError(f"--tp-size {tp} does not divide {', '.join(problems)}; choose a tp size that divides them")


def _kv_heads_for_rank(cfg: ModelConfig, rank: int, tp: int) -> slice:
    """KV head range of a rank; with fewer KV heads than ranks, each rank holds a duplicate."""
    kv = cfg.num_key_value_heads
    if kv >= tp:
        per = kv // tp
        return slice(rank * per, (rank + 1) * per)
    head = rank * kv // tp
    return slice(head, head + 1)


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, 0) * (t.dim() - 1) + (0, rows))


@dataclass(frozen=True)
class _Shard:
    """What one TP rank holds of a source tensor, by its target's split (models/layout.py `Split`)."""

    cfg: ModelConfig
    rank: int
    tp: int

    def piece(
        self, split: Split, src: Source, bias: bool
    ) -> tuple[tuple[int, ...], Callable[[torch.Tensor], torch.Tensor]]:
        """(the piece's shape, how to cut it from the full source tensor)."""
        full = src.weight_shape(self.cfg)[:-1] if bias else src.weight_shape(self.cfg)
        rank, tp, rest = self.rank, self.tp, full[1:]
        if split == "replicate" or (split == "cols" and bias):
            return full, lambda t: t
        if split == "cols":
            return (full[0], full[1] // tp, *full[2:]), lambda t: t.chunk(tp, dim=1)[rank]
        if split == "rows":
            return (full[0] // tp, *rest), lambda t: t.chunk(tp)[rank]
        if split == "vocab":  # zero rows up to a multiple of the ranks
            pad = -(-full[0] // tp) * tp - full[0]
            return ((full[0] + pad) // tp, *rest), lambda t: _pad_rows(t, pad).chunk(tp)[rank]
        heads, hd = self._heads(src.shape[0]), self.cfg.head_size
        return ((heads.stop - heads.start) * hd, *rest), lambda t: t.unflatten(0, (-1, hd))[heads].flatten(0, 1)

    def _heads(self, rows: str) -> slice:
        """This rank's heads of a q (rows "q_size") or k/v (rows "kv_size") projection."""
        if rows == "kv_size":
            return _kv_heads_for_rank(self.cfg, self.rank, self.tp)
        assert rows == "q_size", f"a heads split cuts q_size or kv_size rows, not {rows}"
        per = self.cfg.num_attention_heads // self.tp
        return slice(self.rank * per, (self.rank + 1) * per)


def _cut_and_cat(
    reader: CheckpointReader,
    dt: torch.dtype,
    srcs: tuple[str, ...],
    cuts: tuple[Callable, ...],
    rows: tuple[slice | None, ...],
) -> torch.Tensor:
    """The parts, each its rows of a fused source tensor (where fused) cut for the rank, concatenated."""
    pieces = [
        cut(reader.load(n)[r if r is not None else slice(None)].to(dt))
        for cut, n, r in zip(cuts, srcs, rows, strict=True)
    ]
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def checkpoint_specs(cfg: ModelConfig, reader: CheckpointReader, rank: int, tp: int) -> list[TensorSpec]:
    """The TensorRT-LLM unified checkpoint tensors of one TP rank (fact sheet section 1): every
    target module of the family's layout, its source parts cut for the rank and concatenated."""
    fam, dt = reader.family, TORCH_DTYPES[cfg.dtype]
    lay, features, shard = fam.layout, fam.features_of(cfg), _Shard(cfg, rank, tp)
    specs: list[TensorSpec] = []

    def add(name: str, target: Target, parts: list[tuple[str, Source, slice | None]], tied: bool = False) -> None:
        """name.weight, and name.bias where its parts have one (fused parts agree, see the
        registry): the parts (their rows of a fused source) cut for this rank, concatenated. A tied
        copy names no source."""
        for suffix in ("weight", "bias") if parts[0][1].bias in features else ("weight",):
            srcs = tuple(f"{module}.{suffix}" for module, _, _ in parts)
            rows = tuple(r for _, _, r in parts)
            shapes, cuts = zip(*(shard.piece(target.split, s, suffix == "bias") for _, s, _ in parts), strict=True)
            shape = (sum(s[0] for s in shapes), *shapes[0][1:])
            make = partial(_cut_and_cat, reader, dt, srcs, cuts, rows)
            uses = tuple(_use(n, r) for n, r in zip(srcs, rows, strict=True))
            specs.append(TensorSpec(f"{name}.{suffix}", shape, dt, make, () if tied else uses))

    has_lm_head = fam.hf.module(LM_HEAD) + ".weight" in reader.names()
    for role, target in lay.trtllm_model.items():
        tied = role == LM_HEAD and not has_lm_head  # the embedding serves as lm_head
        parts = [(fam.hf.module(EMBED if tied else p), lay.model[p], None) for p in target.parts]
        add(target.name, target, parts, tied)
    for i in range(cfg.num_hidden_layers):
        prefix = lay.trtllm_prefix.format(i=i)
        for target in lay.layer_targets(cfg, i).values():
            parts = [(fam.hf.module(p, i), lay.layer[p], fam.hf.rows(p, lay, cfg)) for p in target.parts]
            add(prefix + target.name, target, parts)
    return specs


def assert_each_source_used_once(specs: list[TensorSpec], expected: list[str], cfg: ModelConfig) -> None:
    """Every source tensor (a fused one: each role's rows of it) feeds exactly one output; only a tied
    lm_head is fed by none of its own. expected: check_source's uses."""
    uses = Counter(s for spec in specs for s in spec.sources)
    allowed = Counter(expected)
    if uses != allowed:
        diff = (uses - allowed) + (allowed - uses)
        raise AssertionError(f"conversion plan uses source tensors wrongly: {dict(diff)}")
    unsourced = [spec.name for spec in specs if not spec.sources]
    if len(unsourced) > (1 if cfg.tie_word_embeddings else 0):
        raise AssertionError(f"conversion plan has outputs without a source: {unsourced}")


def engine_specs(cfg: ModelConfig, reader: CheckpointReader) -> list[TensorSpec]:
    """The torch engine's weights: the rank-0 (tp=1) checkpoint with the layout's engine fusions
    (fc and gate in one GEMM, [fc; gate] on the out dim) and no lm_head when it is tied."""
    specs = {s.name: s for s in checkpoint_specs(cfg, reader, rank=0, tp=1)}
    out: list[TensorSpec] = []
    for name, parts in reader.family.layout.engine_tensors(specs, cfg).items():
        ss = [specs[p] for p in parts]
        if len(ss) == 1:
            out.append(ss[0])
            continue
        shape = (sum(s.shape[0] for s in ss), *ss[0].shape[1:])
        make = lambda ss=ss: torch.cat([s.make() for s in ss])  # noqa: E731
        out.append(TensorSpec(name, shape, ss[0].dtype, make, tuple(n for s in ss for n in s.sources)))
    return out
