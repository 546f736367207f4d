"""Chunks: a batch of env copies (or update samples) processed a slice at a time."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

#: ``"auto"`` chunks on CPU hold about this many activation floats (8 MiB: 2048 rows of a 2x256
#: actor + critic, measured fastest; larger chunks fall out of the core's caches).
CPU_CHUNK_FLOATS = 2**21
#: Bounds of an ``"auto"`` chunk on CPU, in rows.
MIN_AUTO_CHUNK, MAX_AUTO_CHUNK = 256, 65536
#: ``"auto"`` on CPU for a model whose width :func:`activation_width` cannot tell.
FALLBACK_CHUNK = 2048


def activation_width(model: torch.nn.Module) -> int | None:
    """Floats one sample's forward writes in ``model``'s layers (``None``: unknown, e.g. convs)."""
    width = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            width += module.out_features
        elif isinstance(module, torch.nn.RNNBase):  # weight_ih_l0: [gates * hidden_size, inputs]
            directions = 2 if module.bidirectional else 1
            width += module.weight_ih_l0.shape[0] * module.num_layers * directions
        elif isinstance(module, torch.nn.RNNCellBase):
            width += module.weight_ih.shape[0]
        elif isinstance(module, torch.nn.Embedding):
            width += module.embedding_dim
        elif isinstance(module, torch.nn.MultiheadAttention):
            width += 4 * module.embed_dim  # queries, keys, values, output
    return width or None


def auto_chunk_rows(width: int | None, budget: int = CPU_CHUNK_FLOATS) -> int:
    """Rows (a power of two) whose activations take about ``budget`` floats."""
    if width is None:
        return FALLBACK_CHUNK
    rows = 2 ** round(math.log2(budget / width))
    return min(max(rows, MIN_AUTO_CHUNK), MAX_AUTO_CHUNK)


def resolve_chunk_size(size: int | str | None, device: torch.device,
                       model: torch.nn.Module) -> int | None:
    """A chunk-size setting; ``"auto"``: :func:`auto_chunk_rows` on CPU, no chunks elsewhere."""
    if size == "auto":
        return auto_chunk_rows(activation_width(model)) if device.type == "cpu" else None
    return None if size is None else int(size)


def in_chunks(fn: Callable[..., Any], *inputs: Any, size: int | None, **kwargs: Any) -> Any:
    """``fn(*inputs, **kwargs)`` on at most ``size`` rows at a time, outputs concatenated."""
    if size is None or inputs[0].shape[0] <= size:
        return fn(*inputs, **kwargs)
    rows = inputs[0].shape[0]
    # outputs go into whole-batch tensors at once, not into the heap holes the next chunk needs
    outputs: tuple[torch.Tensor, ...] = ()
    single = False
    for start in range(0, rows, size):
        part = fn(*(x[start : start + size] for x in inputs), **kwargs)
        single = isinstance(part, torch.Tensor)
        parts = (part,) if single else part
        if not outputs:
            outputs = tuple(p.new_empty((rows, *p.shape[1:])) for p in parts)
        for output, p in zip(outputs, parts):
            output[start : start + size] = p
        del part, parts
    return outputs[0] if single else outputs
