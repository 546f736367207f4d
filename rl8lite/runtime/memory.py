"""Memory: bytes held by tensors and optimizers, the device's totals, and glibc's malloc kept
from returning freed memory (when asked)."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterable

import torch

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (glibc's malloc.h)
#: Blocks up to this size come from malloc's heap (glibc's maximum on 64-bit); freed heap
#: memory up to TRIM_THRESHOLD is kept for reuse.
MMAP_THRESHOLD, TRIM_THRESHOLD = 32 * 2**20, 2**30
_applied = False


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of storage held by ``tensors``."""
    return sum(t.numel() * t.element_size() for t in tensors)


def optimizer_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer's per-parameter state (Adam: two moments and a step)."""
    states = optimizer.state.values()
    return tensor_bytes(v for s in states for v in s.values() if isinstance(v, torch.Tensor))


def device_memory(device: torch.device) -> dict[str, float]:
    """The device's ``memory/free``, ``memory/total`` (bytes) and ``memory/percent`` used."""
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
    return {"memory/free": float(free), "memory/total": float(total),
            "memory/percent": 100.0 * (total - free) / total}


def user_malloc_settings() -> list[str]:
    """The environment variables set that tune glibc malloc (``MALLOC_*``, ``GLIBC_TUNABLES``)."""
    names = [name for name in os.environ if name.startswith("MALLOC_")]
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        names.append("GLIBC_TUNABLES")
    return names


def keep_freed_memory() -> bool:
    """Apply :data:`MMAP_THRESHOLD` and :data:`TRIM_THRESHOLD` once per process; return whether
    they are in effect (never off Linux, without glibc, or with :func:`user_malloc_settings`)."""
    global _applied
    if not sys.platform.startswith("linux") or user_malloc_settings():
        return False
    if _applied:
        return True
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1  # 1: success
                and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    return _applied
