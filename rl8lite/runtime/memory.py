"""Memory accounting: bytes held by the buffer, model and optimizer, and the device's totals."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from tensordict import TensorDict


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of storage held by ``tensors``."""
    return sum(t.numel() * t.element_size() for t in tensors)


def tensordict_bytes(td: TensorDict) -> int:
    """Bytes of every leaf of ``td``."""
    return tensor_bytes(td.values(include_nested=True, leaves_only=True))


def optimizer_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer's per-parameter state (Adam: two moments and a step)."""
    return tensor_bytes(
        v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)
    )


def device_memory(device: torch.device) -> dict[str, float]:
    """``memory/free``, ``memory/total`` (bytes) and ``memory/percent`` used, of the device."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
    else:
        try:
            with open("/proc/meminfo") as f:
                info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
        except OSError:
            return {}
        free, total = info.get("MemAvailable", 0), info.get("MemTotal", 0)
    if not total:
        return {}
    return {
        "memory/free": float(free),
        "memory/total": float(total),
        "memory/percent": 100.0 * (total - free) / total,
    }
