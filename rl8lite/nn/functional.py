"""Masks, masked pooling and sampling over padded sequences (rl8's ``rl8.nn.functional``). A
*valid* mask is nonzero where a value is real (``~padding_mask`` of a view); a *float* mask is 0
where valid and ``-inf`` where not."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .ppo import generalized_advantage_estimate, ppo_losses

__all__ = [
    "binary_mask_to_float_mask", "float_mask_to_binary_mask", "generalized_advantage_estimate",
    "mask_from_lengths", "masked_avg", "masked_categorical_sample", "masked_log_softmax",
    "masked_max", "ppo_losses", "skip_connection",
]

def check_skip_kind(kind: str | None) -> None:
    """Raise ``ValueError`` unless ``kind`` is a kind of :func:`skip_connection`."""
    if kind not in (kinds := ["cat", "residual", None]):
        raise ValueError(f"no skip connection kind {kind!r}: choose one of {kinds}")


def _expand_mask(mask: Tensor, like: Tensor) -> Tensor:
    return mask.reshape(*mask.shape, *[1] * (like.dim() - mask.dim()))


def _masked_lowest(x: Tensor, mask: Tensor | None) -> Tensor:
    if mask is None:
        return x
    lowest = torch.finfo(x.dtype).min if x.is_floating_point() else torch.iinfo(x.dtype).min
    return x.masked_fill(_expand_mask(mask, x) == 0, lowest)


def binary_mask_to_float_mask(mask: Tensor, /) -> Tensor:
    """A valid mask as a float32 additive mask: 0 where valid, ``-inf`` where not."""
    return torch.zeros(mask.shape, device=mask.device).masked_fill(mask == 0, float("-inf"))


def float_mask_to_binary_mask(mask: Tensor, /) -> Tensor:
    """An additive float mask as a bool valid mask: ``False`` exactly where it is ``-inf``."""
    return mask != float("-inf")


def mask_from_lengths(x: Tensor, lengths: Tensor, /) -> Tensor:
    """``[B, T]`` valid mask of sequences ``x`` ``[B, T, ...]`` of ``lengths`` real steps.

    Examples:
        >>> mask_from_lengths(torch.zeros(2, 3), torch.tensor([1, 3]))
        tensor([[ True, False, False],
                [ True,  True,  True]])
    """
    steps = torch.arange(x.shape[1], device=lengths.device)
    return steps < lengths.reshape(-1, 1).long()


def masked_avg(x: Tensor, /, *, mask: Tensor | None = None, dim: int = 1,
               keepdim: bool = False) -> Tensor:
    """The mean of ``x`` along ``dim`` over its valid values (NaN where none is); ``mask``
    covers ``x``'s leading dims, and a float one weights the values."""
    if mask is None:
        return x.mean(dim=dim, keepdim=keepdim)
    mask = _expand_mask(mask, x)
    weights = mask.to(x.dtype) if x.is_floating_point() else mask.float()
    total = torch.where(mask != 0, x * weights, 0).sum(dim=dim, keepdim=keepdim)
    return total / weights.expand_as(x).sum(dim=dim, keepdim=keepdim)


def masked_max(x: Tensor, /, *, mask: Tensor | None = None, dim: int = 1) -> tuple[Tensor, Tensor]:
    """``(max, argmax)`` of ``x`` along ``dim`` (kept) over its valid values (the dtype's
    lowest value at index 0 where none is); ``mask`` covers ``x``'s leading dims.

    Examples:
        >>> masked_max(torch.tensor([[1.0, 5.0, 3.0]]), mask=torch.tensor([[True, False, True]]))
        (tensor([[3.]]), tensor([[2]]))
    """
    x = _masked_lowest(x, mask)
    index = x.argmax(dim=dim, keepdim=True)
    return x.gather(dim, index), index


def masked_log_softmax(x: Tensor, /, *, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """Log-softmax of logits ``x`` along ``dim``, invalid values at probability 0."""
    return F.log_softmax(_masked_lowest(x, mask), dim=dim)


def masked_categorical_sample(x: Tensor, /, *, mask: Tensor | None = None,
                              dim: int = 1) -> tuple[Tensor, Tensor]:
    """``(logits, samples)``: one valid category ``[B, ..., 1]`` drawn per row of logits ``x``
    ``[B, ..., N]``, and the (masked) logits at it along ``dim``."""
    x = _masked_lowest(x, mask)
    samples = torch.distributions.Categorical(logits=x, validate_args=False).sample().unsqueeze(-1)
    return x.gather(dim, samples), samples


def skip_connection(x: Tensor, y: Tensor, /, *, kind: str | None = "cat", dim: int = -1) -> Tensor:
    """Join a layer's input ``x`` and output ``y``: ``"residual"`` adds them, ``"cat"``
    concatenates them along ``dim``, ``None`` returns ``y``."""
    if kind == "residual":
        return x + y
    if kind == "cat":
        return torch.cat([x, y], dim=dim)
    check_skip_kind(kind)
    return y
