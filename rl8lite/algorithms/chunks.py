"""Chunks: a batch of env copies (or update samples) processed a slice at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

#: ``collect_chunk_size="auto"`` on CPU: copies per policy forward while collecting.
CPU_COLLECT_CHUNK = 2048
#: ``update_chunk_size="auto"`` on CPU: samples per forward/backward of the update.
CPU_UPDATE_CHUNK = 2048


def resolve_chunk_size(size: int | str | None, device: torch.device, cpu_size: int) -> int | None:
    """A chunk-size setting: ``"auto"`` is ``cpu_size`` on CPU and no chunking elsewhere."""
    if size == "auto":
        return cpu_size if device.type == "cpu" else None
    return None if size is None else int(size)


def in_chunks(fn: Callable[..., Any], *inputs: Any, size: int | None) -> Any:
    """``fn(*inputs)`` on at most ``size`` rows at a time (``None``: all at once), outputs
    concatenated (a tensor, or a tuple of tensors, per row)."""
    rows = inputs[0].shape[0]
    if size is None or rows <= size:
        return fn(*inputs)
    # Each chunk's outputs are copied into whole-batch tensors at once, not kept
    # until a final concatenation: small blocks outliving a chunk would sit in the
    # heap holes its activations leave, and the next chunk's would not fit there.
    outputs: tuple[torch.Tensor, ...] = ()
    single = False
    for start in range(0, rows, size):
        part = fn(*(x[start : start + size] for x in inputs))
        single = isinstance(part, torch.Tensor)
        parts = (part,) if single else part
        if not outputs:
            outputs = tuple(p.new_empty((rows, *p.shape[1:])) for p in parts)
        for output, p in zip(outputs, parts):
            output[start : start + size] = p
        del part, parts
    return outputs[0] if single else outputs


def index_dtype(num_rows: int) -> torch.dtype:
    """int32 when every row index below ``num_rows`` fits (4 bytes per index, not 8)."""
    return torch.int32 if num_rows < 2**31 else torch.int64
