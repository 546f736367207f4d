"""Functional helpers for models over padded sequences (rl8's ``rl8.nn.functional``).

Masks come in two conventions. The *valid* masks these functions take (``mask``) are
``True`` / nonzero where a value is real and ``False`` / 0 where it is padding or not
allowed; a view's ``DataKeys.PADDING_MASK`` and attention's ``key_padding_mask`` are the
opposite (``True`` at padding), so pass ``~padding_mask``. An additive *float* mask is 0
where valid and ``-inf`` where not (:func:`binary_mask_to_float_mask`).

rl8's GAE and PPO loss over TensorDicts are here too (:func:`generalized_advantage_estimate`,
:func:`ppo_losses`), as adapters over rl8lite's pure functions (:mod:`rl8lite.nn.ppo`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .ppo import generalized_advantage_estimate, ppo_losses

__all__ = [
    "binary_mask_to_float_mask", "float_mask_to_binary_mask", "generalized_advantage_estimate",
    "mask_from_lengths", "masked_avg", "masked_categorical_sample", "masked_log_softmax", "masked_max",
    "ppo_losses", "skip_connection",
]

#: Kinds of :func:`skip_connection`.
SKIP_KINDS = ("cat", "residual", None)


def _expand_mask(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``mask`` ``[B, T]`` with trailing singleton dims so it broadcasts against ``like`` ``[B, T, ...]``."""
    return mask.reshape(*mask.shape, *[1] * (like.dim() - mask.dim()))


def _lowest(x: torch.Tensor) -> float | int:
    """The lowest finite value of ``x``'s dtype: what masked values become before a max or softmax."""
    return torch.finfo(x.dtype).min if x.is_floating_point() else torch.iinfo(x.dtype).min


def binary_mask_to_float_mask(mask: torch.Tensor, /) -> torch.Tensor:
    """A valid mask (``True`` / 1 where valid) as an additive float mask (0 where valid, ``-inf`` where not).

    Args:
        mask: Bool or 0/1 tensor.

    Returns:
        float32 tensor of ``mask``'s shape.

    Examples:
        >>> import torch
        >>> binary_mask_to_float_mask(torch.tensor([True, False]))
        tensor([0., -inf])
    """
    return torch.zeros(mask.shape, device=mask.device).masked_fill(mask == 0, float("-inf"))


def float_mask_to_binary_mask(mask: torch.Tensor, /) -> torch.Tensor:
    """An additive float mask (0 where valid, ``-inf`` where not) as a bool valid mask.

    Args:
        mask: Float tensor.

    Returns:
        Bool tensor of ``mask``'s shape: ``False`` exactly where ``mask`` is ``-inf``.

    Examples:
        >>> import torch
        >>> float_mask_to_binary_mask(torch.tensor([0.0, float("-inf")]))
        tensor([ True, False])
    """
    return mask != float("-inf")


def mask_from_lengths(x: torch.Tensor, lengths: torch.Tensor, /) -> torch.Tensor:
    """The valid mask of sequences ``x`` whose first ``lengths`` steps are real.

    Args:
        x: ``[B, T, ...]``.
        lengths: ``[B]``: real steps at the start of each sequence.

    Returns:
        ``[B, T]`` bool: ``True`` at step ``t`` of sequence ``b`` when ``t < lengths[b]``.

    Examples:
        >>> import torch
        >>> mask_from_lengths(torch.zeros(2, 3), torch.tensor([1, 3]))
        tensor([[ True, False, False],
                [ True,  True,  True]])
    """
    steps = torch.arange(x.shape[1], device=lengths.device)
    return steps < lengths.reshape(-1, 1).long()


def masked_avg(
    x: torch.Tensor, /, *, mask: torch.Tensor | None = None, dim: int = 1, keepdim: bool = False
) -> torch.Tensor:
    """The mean of ``x`` along ``dim`` over its valid values only (pooling padded sequences).

    Args:
        x: ``[B, T, ...]``.
        mask: ``[B, T]`` (or any leading part of ``x``'s shape) valid mask; 0 / ``False``
            at padding, whose values never reach the result (not even a NaN). A float mask
            weights the values it keeps. ``None``: a plain mean.
        dim: Dimension to average along.
        keepdim: Keep ``dim`` with size 1.

    Returns:
        ``x`` averaged along ``dim``; NaN where no value is valid.

    Examples:
        >>> import torch
        >>> x = torch.tensor([[1.0, 2.0, 9.0]])
        >>> masked_avg(x, mask=torch.tensor([[True, True, False]]))
        tensor([1.5000])
    """
    if mask is None:
        return x.mean(dim=dim, keepdim=keepdim)
    mask = _expand_mask(mask, x)
    weights = mask.to(x.dtype) if x.is_floating_point() else mask.float()
    total = torch.where(mask != 0, x * weights, 0).sum(dim=dim, keepdim=keepdim)
    return total / weights.expand_as(x).sum(dim=dim, keepdim=keepdim)


def masked_max(
    x: torch.Tensor, /, *, mask: torch.Tensor | None = None, dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """The max of ``x`` along ``dim`` over its valid values, and where it is.

    Args:
        x: ``[B, T, ...]``.
        mask: ``[B, T]`` (or any leading part of ``x``'s shape) valid mask; ``None``: all valid.
        dim: Dimension to take the max along.

    Returns:
        ``(max, argmax)``, both with ``dim`` kept (size 1); ``argmax`` is the first
        valid index holding the max. Where no value is valid, the max is the dtype's
        lowest finite value and the index 0.

    Examples:
        >>> import torch
        >>> x = torch.tensor([[1.0, 5.0, 3.0]])
        >>> masked_max(x, mask=torch.tensor([[True, False, True]]))
        (tensor([[3.]]), tensor([[2]]))
    """
    if mask is not None:
        x = x.masked_fill(_expand_mask(mask, x) == 0, _lowest(x))
    index = x.argmax(dim=dim, keepdim=True)
    return x.gather(dim, index), index


def masked_log_softmax(x: torch.Tensor, /, *, mask: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """Log-softmax of ``x`` along ``dim`` over the valid values (e.g. which element to point at).

    Args:
        x: ``[B, T, ...]`` logits.
        mask: Valid mask broadcastable to ``x`` once trailing dims are added (e.g.
            ``[B, T]``, or ``x``'s own shape); ``None``: all valid.
        dim: Dimension to normalise along.

    Returns:
        Log-probabilities of ``x``'s shape: those of the valid values sum (as
        probabilities) to 1; invalid values get the dtype's lowest finite log-probability
        (probability 0).

    Examples:
        >>> import torch
        >>> masked_log_softmax(torch.zeros(1, 3), mask=torch.tensor([[True, True, False]])).exp()
        tensor([[0.5000, 0.5000, 0.0000]])
    """
    if mask is not None:
        x = x.masked_fill(_expand_mask(mask, x) == 0, _lowest(x))
    return F.log_softmax(x, dim=dim)


def masked_categorical_sample(
    x: torch.Tensor, /, *, mask: torch.Tensor | None = None, dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one category per row from logits ``x`` (often :func:`masked_log_softmax`'s
    output), never a masked one.

    Categories lie along ``x``'s last dimension, as for :class:`torch.distributions.Categorical`.

    Args:
        x: ``[B, ..., N]`` logits over ``N`` categories.
        mask: Valid mask broadcastable to ``x`` once trailing dims are added; ``None``: all valid.
        dim: Dimension to gather the drawn logits along (the categories' dimension:
            ``1`` or ``-1`` for ``[B, N]`` logits).

    Returns:
        ``(logits, samples)``: the indices drawn, ``[B, ..., 1]``, and the (masked)
        logits of ``x`` at those indices along ``dim``.

    Examples:
        >>> import torch
        >>> logits, samples = masked_categorical_sample(torch.zeros(2, 3), mask=torch.tensor([[0, 1, 0], [1, 0, 0]]))
        >>> samples
        tensor([[1],
                [0]])
    """
    if mask is not None:
        x = x.masked_fill(_expand_mask(mask, x) == 0, _lowest(x))
    samples = torch.distributions.Categorical(logits=x, validate_args=False).sample().unsqueeze(-1)
    return x.gather(dim, samples), samples


def skip_connection(x: torch.Tensor, y: torch.Tensor, /, *, kind: str | None = "cat", dim: int = -1) -> torch.Tensor:
    """Join a layer's input ``x`` and output ``y``.

    Args:
        x: ``[B, T, ...]``.
        y: ``x``'s shape.
        kind: ``"residual"`` (``x + y``), ``"cat"`` (``x`` and ``y`` concatenated along
            ``dim``) or ``None`` (``y`` alone).
        dim: Dimension to concatenate along (``"cat"`` only).

    Returns:
        ``x``'s shape, or twice as large along ``dim`` for ``"cat"``.

    Examples:
        >>> import torch
        >>> skip_connection(torch.ones(1, 2), torch.zeros(1, 2))
        tensor([[1., 1., 0., 0.]])
        >>> skip_connection(torch.ones(1, 2), torch.ones(1, 2), kind="residual")
        tensor([[2., 2.]])
    """
    if kind == "residual":
        return x + y
    if kind == "cat":
        return torch.cat([x, y], dim=dim)
    if kind is None:
        return y
    raise ValueError(f"no skip connection kind {kind!r}: choose one of {list(SKIP_KINDS)}")
