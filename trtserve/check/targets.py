"""Where an engine is meant to run: named presets, or an explicit size. One device each; a config
with tp_size N runs on N of them, and the memory check is per device.

A preset's memory is what the device reports (nvidia-smi's total for GPUs). The engine gets
`usable` of it: 90%, leaving room for the CUDA context, cuBLAS / TensorRT workspaces and the
allocator (TensorRT-LLM by default also leaves 10% of free memory unused), or on a CPU host for
the OS and the Python process. An explicit size (`24GiB`, `25769803776`) is taken as what the
engine may use, whole.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from pydantic import ByteSize, TypeAdapter, ValidationError

MiB, GiB = 2**20, 2**30
USABLE_SHARE = 0.9


@dataclass(frozen=True)
class Target:
    name: str
    memory: int  # bytes one device has
    device: str | None  # "cuda" or "cpu" (engine/backends.py's target_device); None: not said
    share: float = USABLE_SHARE  # of memory the engine may use
    sm: str | None = None  # a GPU's compute capability ("9.0"): trtllm-build's rules depend on it

    @property
    def usable(self) -> int:
        return int(self.memory * self.share)

    def to_dict(self) -> dict:
        return {"name": self.name, "memory": self.memory, "usable": self.usable, "device": self.device, "sm": self.sm}


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("h100-80gb", 81559 * MiB, "cuda", sm="9.0"),
        Target("h200-141gb", 143771 * MiB, "cuda", sm="9.0"),
        Target("b200-180gb", 183359 * MiB, "cuda", sm="10.0"),  # Blackwell: trtllm-build refuses some formats
        Target("a100-80gb", 81920 * MiB, "cuda", sm="8.0"),
        Target("a100-40gb", 40960 * MiB, "cuda", sm="8.0"),
        Target("l40s-48gb", 46068 * MiB, "cuda", sm="8.9"),
        Target("l4-24gb", 23034 * MiB, "cuda", sm="8.9"),
        Target("a10g-24gb", 23028 * MiB, "cuda", sm="8.6"),
        Target("cpu-16gb", 16 * GiB, "cpu"),
        Target("cpu-32gb", 32 * GiB, "cpu"),
        Target("cpu-64gb", 64 * GiB, "cpu"),
    )
}


def resolve_target(value: str | int) -> Target:
    """A preset by name, or an explicit size in bytes ("24GiB", 25769803776); ValueError naming the
    presets (and the nearest one) otherwise."""
    if isinstance(value, str) and value in TARGETS:
        return TARGETS[value]
    try:
        size = int(TypeAdapter(ByteSize).validate_python(value))
    except ValidationError:
        near = difflib.get_close_matches(str(value), list(TARGETS), n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ValueError(
            f"target {value!r} is neither a preset nor a size; {hint}presets: {', '.join(TARGETS)}; "
            "or give bytes like 24GiB"
        ) from None
    if size <= 0:
        raise ValueError(f"target {value!r} must be a positive size")
    return Target(str(value) if isinstance(value, str) else f"{size} bytes", size, None, 1.0)
