"""Moving a model's weights to host memory and back (the engine's sleep on CUDA).

Every tensor reachable from the model through attributes, lists, tuples and dicts is moved by its
storage, so tensors that share one (a tied lm_head viewing the embedding) still share it afterwards.
On a CPU the weights are already in host memory: both moves do nothing.
"""

from __future__ import annotations

import torch

_PLAIN = (str, bytes, int, float, bool, type(None))


def to_host(model) -> None:
    """Weights on CUDA to page-locked host memory, their device memory returned to the driver."""
    if model.device.type != "cuda":
        return
    model.host_device = model.device
    move(model, lambda s: s.cpu().pin_memory())
    torch.cuda.empty_cache()


def to_device(model) -> None:
    """Undo to_host (nothing to do if the weights never left)."""
    device = getattr(model, "host_device", None)  # set only by to_host
    if device is None:
        return
    move(model, lambda s: s.to(device))
    model.host_device = None


def move(root, convert) -> None:
    """Replace every tensor reachable from `root` by one over `convert(its storage)`, each storage once."""
    storages: dict[int, torch.UntypedStorage] = {}

    def moved(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        new = storages.setdefault(s.data_ptr(), convert(s))
        return torch.empty(0, dtype=t.dtype, device=new.device).set_(new, t.storage_offset(), t.size(), t.stride())

    seen: set[int] = set()

    def visit(obj):
        if isinstance(obj, torch.Tensor):
            return moved(obj)
        if isinstance(obj, _PLAIN) or id(obj) in seen:
            return obj
        seen.add(id(obj))
        if isinstance(obj, list):
            obj[:] = [visit(x) for x in obj]
        elif isinstance(obj, tuple):
            return type(obj)(visit(x) for x in obj) if not hasattr(obj, "_fields") else type(obj)(*map(visit, obj))
        elif isinstance(obj, dict):
            for k in list(obj):
                obj[k] = visit(obj[k])
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("trtserve."):
            for k, v in list(vars(obj).items()):
                setattr(obj, k, visit(v))
        return obj

    visit(root)
