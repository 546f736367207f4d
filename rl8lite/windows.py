"""Windows of past steps over sequences ``[B, T, ...]``, built as strided views.

``B`` sequences (env copies) of ``T`` steps. A window of ``size`` steps ending at step
``t`` holds steps ``t - size + 1 .. t``; where those precede the sequence (or the
episode) they are padding: zeros in ``DataKeys.INPUTS``, ``True`` in the boolean
``DataKeys.PADDING_MASK`` (``torch.nn.MultiheadAttention``'s ``key_padding_mask``
convention; ``~mask`` marks valid steps for :func:`rl8lite.nn.masked_avg`).

Windows come from :meth:`torch.Tensor.unfold` (views, never stacks of per-step copies);
each function says when its result is a view of its input. rl8's functions
(:func:`rolling_window`, :func:`pad_last_sequence`, :func:`pad_whole_sequence`) are here
and in :mod:`rl8lite.views`. For a training loop with one ``[N, T + 1, ...]`` rollout
buffer, :func:`windows_at_every_step` (update) and :func:`window_at_last_step`
(collect) build episode-aware windows: a window never mixes two episodes, given
:func:`episode_steps`; :func:`zero_padding` zeroes the padding of gathered windows, and
:func:`window_padding_mask` gives the mask of just those.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict

from .data import DataKeys

__all__ = [
    "episode_steps", "pad_last_sequence", "pad_whole_sequence", "rolling_window", "window_at_last_step",
    "window_padding_mask", "windows_at_every_step", "zero_padding",
]

#: What a window is taken over: a tensor, or a TensorDict (nested keys included).
Item = torch.Tensor | TensorDict


def check_sequence(x: Item, size: int) -> tuple[int, int]:
    """``(B, T)`` of a sequence ``x`` ``[B, T, ...]``; a clear error for a window that cannot be taken."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"a window's size must be an int >= 1, got {size!r}")
    if len(x.shape) < 2:
        raise ValueError(f"expected a batch [B, T, ...] with a time dimension, got shape {list(x.shape)}")
    return x.shape[0], x.shape[1]


def per_leaf(fn: Callable[[torch.Tensor], Item], x: Item, batch_size: list[int]) -> Item:
    """``fn`` on a tensor, or on every leaf of a TensorDict (nested keys included)."""
    return fn(x) if isinstance(x, torch.Tensor) else x.apply(fn, batch_size=batch_size)


def window_padding_mask(episode_steps: torch.Tensor, size: int, /) -> torch.Tensor:
    """Which steps of windows of ``size`` are padding, given the index of each window's last
    step within its episode.

    Args:
        episode_steps: ``[...]`` index of each window's last step in its episode (or
            sequence): 0 at its first step (see :func:`episode_steps`).
        size: Steps per window.

    Returns:
        ``[..., size]`` bool: position ``j`` holds the step ``size - 1 - j`` steps before
        the last, padding (``True``) when that precedes the episode's first step. Cheaper
        on a minibatch's windows (``episode_steps[rows]``) than on every window.

    Examples:
        >>> import torch
        >>> window_padding_mask(torch.tensor([0, 1, 5]), 3)
        tensor([[ True,  True, False],
                [ True, False, False],
                [False, False, False]])
    """
    offsets = torch.arange(size - 1, -1, -1, device=episode_steps.device)
    return offsets > episode_steps.unsqueeze(-1)


def _windows_td(inputs: torch.Tensor, padding_mask: torch.Tensor) -> TensorDict:
    """The ``{INPUTS, PADDING_MASK}`` pair, batch ``[B, T]`` (its mask's first two dims)."""
    return TensorDict({DataKeys.INPUTS: inputs, DataKeys.PADDING_MASK: padding_mask},
                      batch_size=padding_mask.shape[:2], device=inputs.device)


def rolling_window(x: torch.Tensor, size: int, /, *, step: int = 1) -> torch.Tensor:
    """Windows of ``size`` consecutive steps over the time dimension of ``x`` (a view of ``x``).

    Args:
        x: ``[B, T, ...]``: ``B`` sequences (env copies) of ``T`` steps.
        size: Steps per window.
        step: Steps between the starts of consecutive windows.

    Returns:
        ``[B, (T - size) // step + 1, size, ...]``: window ``i`` holds steps
        ``i * step .. i * step + size - 1``. A strided view of ``x``: no copy, and
        writing into ``x`` shows in it.

    Examples:
        >>> import torch
        >>> x = torch.arange(8.0).reshape(2, 4)
        >>> rolling_window(x, 2)[0]
        tensor([[0., 1.],
                [1., 2.],
                [2., 3.]])
        >>> rolling_window(x, 2).untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        True
    """
    _, num_steps = check_sequence(x, size)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"a rolling window's step must be an int >= 1, got {step!r}")
    if size > num_steps:
        raise ValueError(f"a window of {size} steps does not fit in a sequence of {num_steps}")
    return x.unfold(1, size, step).movedim(-1, 2)


def pad_last_sequence(x: torch.Tensor, size: int, /) -> TensorDict:
    """The last ``size`` steps of each sequence, with zeros in front where there are fewer.

    Args:
        x: ``[B, T, ...]``: ``B`` sequences of ``T`` steps.
        size: Steps wanted.

    Returns:
        TensorDict ``[B, size]``: ``INPUTS`` ``[B, size, ...]`` (a view of ``x`` when
        ``T >= size``, else a new tensor whose first ``size - T`` steps are zeros) and
        ``PADDING_MASK`` ``[B, size]``, ``True`` at those padding steps.

    Examples:
        >>> import torch
        >>> out = pad_last_sequence(torch.tensor([[1.0], [2.0]]), 3)
        >>> out["inputs"]
        tensor([[0., 0., 1.],
                [0., 0., 2.]])
        >>> out["padding_mask"][0]
        tensor([ True,  True, False])
    """
    batch, num_steps = check_sequence(x, size)
    if num_steps >= size:
        inputs = x[:, num_steps - size:]
    else:
        inputs = x.new_zeros(batch, size, *x.shape[2:])
        inputs[:, size - num_steps:] = x
    steps = torch.arange(num_steps - 1, num_steps, device=x.device).expand(batch)
    return _windows_td(inputs, window_padding_mask(steps, size))


def pad_whole_sequence(x: torch.Tensor, size: int, /) -> TensorDict:
    """Each sequence behind ``size - 1`` zero steps, so that every step ends a window of ``size``.

    Args:
        x: ``[B, T, ...]``: ``B`` sequences of ``T`` steps.
        size: Steps per window the result is for (:func:`rolling_window` over it gives
            ``T`` windows).

    Returns:
        TensorDict ``[B, T + size - 1]`` (new tensors): ``INPUTS`` ``[B, T + size - 1, ...]``,
        ``x`` behind ``size - 1`` zero steps, and ``PADDING_MASK`` ``[B, T + size - 1]``,
        ``True`` at those steps.

    Examples:
        >>> import torch
        >>> out = pad_whole_sequence(torch.tensor([[1.0, 2.0]]), 2)
        >>> out["inputs"], out["padding_mask"]
        (tensor([[0., 1., 2.]]), tensor([[ True, False, False]]))
    """
    batch, num_steps = check_sequence(x, size)
    inputs = x.new_zeros(batch, num_steps + size - 1, *x.shape[2:])
    inputs[:, size - 1:] = x
    steps = torch.arange(-(size - 1), num_steps, device=x.device).expand(batch, -1)
    return _windows_td(inputs, steps < 0)


def windows_at_every_step(
    x: Item, size: int, /, *, history: int = 0, episode_steps: torch.Tensor | None = None
) -> TensorDict:
    """The window of ``size`` steps ending at each step of ``x`` after its first ``history``.

    Args:
        x: Tensor or TensorDict ``[B, history + T, ...]``: e.g. a rollout buffer's
            ``[N, T + 1]`` observations, preceded by ``history`` steps that only serve
            as the past of the first windows (the previous collect's last ones).
        size: Steps per window (a view requirement's ``shift + 1``).
        history: Leading steps of ``x`` that end no window. With ``history >= size - 1``
            every window is a view of ``x``; with fewer, ``x`` is copied once behind
            ``size - 1 - history`` zero steps and the windows are views of that copy.
        episode_steps: ``[B, T]`` index of each window's last step within its episode
            (0 at an episode's first step; see :func:`episode_steps`). Window steps
            before the episode's first are padding. Default: ``history + t``, the
            episode starts at ``x``'s first step.

    Returns:
        TensorDict ``[B, T]``: ``INPUTS`` ``[B, T, size, ...]``, window ``t`` holding
        steps ``history + t - size + 1 .. history + t`` of ``x`` (a strided view, see
        ``history``), and ``PADDING_MASK`` ``[B, T, size]``; for a TensorDict ``x``, one
        such pair per leaf (the leaves share one mask). Padding steps before ``x``'s
        first are zeros; those masked by ``episode_steps`` hold ``x``'s steps, of the
        previous episode: index what you need and :func:`zero_padding` it.

    Examples:
        >>> import torch
        >>> obs = torch.tensor([[1.0, 2.0, 3.0]])
        >>> windows = windows_at_every_step(obs, 2, episode_steps=torch.tensor([[0, 1, 0]]))
        >>> windows["inputs"][0]
        tensor([[0., 1.],
                [1., 2.],
                [2., 3.]])
        >>> windows["padding_mask"][0]
        tensor([[ True, False],
                [False, False],
                [ True, False]])
    """
    batch, length = check_sequence(x, size)
    if not 0 <= history <= length - 1:
        raise ValueError(f"history must be in [0, {length - 1}] for {length} steps, got {history}")
    num_windows = length - history
    available = history + torch.arange(num_windows, device=x.device).expand(batch, -1)
    if episode_steps is None:
        steps = available
    else:
        if tuple(episode_steps.shape) != (batch, num_windows):
            raise ValueError(f"episode_steps must be [B, T] = {[batch, num_windows]}, "
                             f"got {list(episode_steps.shape)}")
        steps = torch.minimum(episode_steps.to(available.dtype), available)
    padding_mask = window_padding_mask(steps, size)
    missing = max(size - 1 - history, 0)

    def windows(t: torch.Tensor) -> TensorDict:
        if missing:
            padded = t.new_zeros(batch, missing + length, *t.shape[2:])
            padded[:, missing:] = t
            t = padded
        return _windows_td(rolling_window(t, size)[:, t.shape[1] - size + 1 - num_windows:], padding_mask)

    return per_leaf(windows, x, [batch, num_windows])


def window_at_last_step(x: Item, size: int, /, *, episode_step: torch.Tensor | None = None) -> TensorDict:
    """The window of ``size`` steps ending at ``x``'s last step, padding zeroed: what a
    model sees when it acts (one small copy, ``[B, size, ...]``).

    Args:
        x: Tensor or TensorDict ``[B, L, ...]``: the steps so far (``L >= 1``; only the
            last ``size`` are read).
        size: Steps per window.
        episode_step: ``[B]`` index of the last step within its episode (see
            :func:`episode_steps`); earlier window steps are padding. Default: the
            episode starts at ``x``'s first step.

    Returns:
        TensorDict ``[B, size]`` (new tensors): ``INPUTS`` ``[B, size, ...]``, zeros at
        padding, and ``PADDING_MASK`` ``[B, size]``; per leaf for a TensorDict ``x``.
        The window of ``windows_at_every_step(x, size, ...)`` at the last step, zeroed.

    Examples:
        >>> import torch
        >>> x = torch.tensor([[1.0, 2.0, 3.0]])
        >>> window_at_last_step(x, 3, episode_step=torch.tensor([1]))["inputs"]
        tensor([[0., 2., 3.]])
    """
    batch, _ = check_sequence(x, size)
    episode_padding = None if episode_step is None else window_padding_mask(episode_step.reshape(batch), size)

    def window(t: torch.Tensor) -> TensorDict:
        out = pad_last_sequence(t, size)
        if episode_padding is not None:
            out[DataKeys.PADDING_MASK] = out[DataKeys.PADDING_MASK] | episode_padding
        return zero_padding(out)

    return per_leaf(window, x, [batch, size])


def zero_padding(windows: TensorDict) -> TensorDict:
    """``windows`` with zeros at every padding step (new tensors; the input is left as is).

    Args:
        windows: TensorDict holding ``INPUTS`` ``[..., size, ...]`` and ``PADDING_MASK``
            ``[..., size]``, or nested TensorDicts that do.

    Returns:
        The same structure, ``INPUTS`` zero where ``PADDING_MASK`` is ``True``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> windows = TensorDict({"inputs": torch.ones(1, 2), "padding_mask": torch.tensor([[True, False]])},
        ...                      batch_size=[1, 2])
        >>> zero_padding(windows)["inputs"]
        tensor([[0., 1.]])
    """
    out = windows.empty()
    for key, value in windows.items():
        if isinstance(value, TensorDict):
            value = zero_padding(value)
        elif key == DataKeys.INPUTS:
            mask = windows[DataKeys.PADDING_MASK]
            value = value.masked_fill(mask.reshape(*mask.shape, *[1] * (value.dim() - mask.dim())), 0)
        out.set(key, value)
    return out


def episode_steps(episode_ends: torch.Tensor, /, *, initial: torch.Tensor | None = None) -> torch.Tensor:
    """Index of each of ``T + 1`` consecutive observations within its episode.

    Args:
        episode_ends: ``[B, T]`` bool: the episode ended at step ``t`` (terminated or
            truncated), so that observation ``t + 1`` is the first of the next one.
        initial: ``[B]`` index of observation 0 within its episode (e.g. the ongoing
            episode's length, carried from the previous collect). Default: 0.

    Returns:
        ``[B, T + 1]`` int64: ``initial`` at 0, then one more per step, back to 0
        after each episode end.

    Examples:
        >>> import torch
        >>> episode_steps(torch.tensor([[False, True, False]]), initial=torch.tensor([4]))
        tensor([[4, 5, 0, 1]])
    """
    batch, num_steps = episode_ends.shape
    index = torch.arange(num_steps + 1, device=episode_ends.device).expand(batch, -1)
    first = torch.zeros(batch, 1, dtype=torch.bool, device=episode_ends.device)
    starts = torch.cat([first, episode_ends.bool()], dim=1)
    last_start = torch.where(starts, index, 0).cummax(dim=1).values
    steps = index - last_start
    if initial is not None:
        steps = steps + torch.where(last_start == 0, initial.reshape(-1, 1).long(), 0)
    return steps
