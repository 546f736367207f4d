"""Whole-tensor reductions that do not copy strided views of the buffer."""

from __future__ import annotations

import torch


def extrema(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(min, max)`` over every element of ``x`` as 0-d tensors; NaN propagates.

    A whole-tensor min/max of a non-contiguous view (such as the buffer's
    ``[:, :T]`` time steps) first copies it into a contiguous temporary as large as
    the view (8 MiB of rewards at 65536 envs x 32 steps). Reducing every dim but
    the first, then the first, needs only ``[N]`` temporaries.
    """
    if x.ndim < 2 or x.is_contiguous():
        return torch.aminmax(x)
    inner = tuple(range(1, x.ndim))
    return x.amin(inner).min(), x.amax(inner).max()
