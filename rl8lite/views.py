"""Windows of past steps over sequences ``[B, T, ...]`` (rl8's ``rl8.views``), strided views
where possible. Steps before the sequence (or its episode) are padding: zeros in
``DataKeys.INPUTS``, ``True`` in ``DataKeys.PADDING_MASK``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

import torch
from tensordict import TensorDict
from torch import Tensor

from .data import DataKeys

__all__ = [
    "PaddedRollingWindow", "RollingWindow", "View", "ViewKind", "ViewMethod", "ViewRequirement",
    "episode_steps", "pad_last_sequence", "pad_whole_sequence", "rolling_window",
    "window_at_last_step", "window_padding_mask", "windows_at_every_step", "zero_padding",
]

Item = Tensor | TensorDict
ViewKind = Literal["last", "all"]
ViewMethod = Literal["rolling_window", "padded_rolling_window"]


def _check_sequence(x: Item, size: int) -> tuple[int, int]:
    """``(B, T)`` of ``x`` ``[B, T, ...]``; a ``ValueError`` for a window that cannot be taken."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"a window's size must be an int >= 1, got {size!r}")
    if len(x.shape) < 2:
        raise ValueError(f"expected a batch [B, T, ...] with a time dimension, got shape"
                         f" {list(x.shape)}")
    return x.shape[0], x.shape[1]


def _per_leaf(fn: Callable[[Tensor], Item], x: Item, batch_size: list[int]) -> Item:
    return fn(x) if isinstance(x, Tensor) else x.apply(fn, batch_size=batch_size)


def _pad_front(x: Tensor, steps: int) -> Tensor:
    padded = x.new_zeros(x.shape[0], steps + x.shape[1], *x.shape[2:])
    padded[:, steps:] = x
    return padded


def _windows_td(inputs: Tensor, padding_mask: Tensor) -> TensorDict:
    return TensorDict({DataKeys.INPUTS: inputs, DataKeys.PADDING_MASK: padding_mask},
                      batch_size=padding_mask.shape[:2], device=inputs.device)


def rolling_window(x: Tensor, size: int, /, *, step: int = 1) -> Tensor:
    """Windows of ``size`` steps over ``x`` ``[B, T, ...]``, starting every ``step`` steps:
    ``[B, (T - size) // step + 1, size, ...]``, a view of ``x``.

    Examples:
        >>> rolling_window(torch.arange(8.0).reshape(2, 4), 2)[0].tolist()
        [[0.0, 1.0], [1.0, 2.0], [2.0, 3.0]]
    """
    _, num_steps = _check_sequence(x, size)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"a rolling window's step must be an int >= 1, got {step!r}")
    if size > num_steps:
        raise ValueError(f"a window of {size} steps does not fit in a sequence of {num_steps}")
    return x.unfold(1, size, step).movedim(-1, 2)


def pad_last_sequence(x: Tensor, size: int, /) -> TensorDict:
    """The last ``size`` steps of each sequence of ``x`` ``[B, T, ...]``, zeros in front where
    there are fewer: TensorDict ``[B, size]`` of ``INPUTS`` and ``PADDING_MASK``.

    Examples:
        >>> out = pad_last_sequence(torch.tensor([[1.0], [2.0]]), 3)
        >>> out["inputs"][1], out["padding_mask"][1]
        (tensor([0., 0., 2.]), tensor([ True,  True, False]))
    """
    batch, num_steps = _check_sequence(x, size)
    inputs = x[:, num_steps - size:] if num_steps >= size else _pad_front(x, size - num_steps)
    steps = torch.arange(num_steps - 1, num_steps, device=x.device).expand(batch)
    return _windows_td(inputs, window_padding_mask(steps, size))


def pad_whole_sequence(x: Tensor, size: int, /) -> TensorDict:
    """Each sequence of ``x`` ``[B, T, ...]`` behind ``size - 1`` zero steps (every step ends
    a window of ``size``): TensorDict ``[B, T + size - 1]`` of ``INPUTS`` and ``PADDING_MASK``.

    Examples:
        >>> out = pad_whole_sequence(torch.tensor([[1.0, 2.0]]), 2)
        >>> out["inputs"], out["padding_mask"]
        (tensor([[0., 1., 2.]]), tensor([[ True, False, False]]))
    """
    batch, num_steps = _check_sequence(x, size)
    steps = torch.arange(-(size - 1), num_steps, device=x.device).expand(batch, -1)
    return _windows_td(_pad_front(x, size - 1), steps < 0)


def episode_steps(episode_ends: Tensor, /, *, initial: Tensor | None = None) -> Tensor:
    """Each observation's index in its episode ``[B, T + 1]``, given ``episode_ends`` ``[B, T]``
    (observation ``t + 1`` starts an episode) and ``initial`` ``[B]`` (default 0).

    Examples:
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


def window_padding_mask(episode_steps: Tensor, size: int, /) -> Tensor:
    """Which steps of windows of ``size`` are padding ``[..., size]``, given the index ``[...]``
    of each window's last step in its episode (:func:`episode_steps`).

    Examples:
        >>> window_padding_mask(torch.tensor([0, 1, 5]), 3).tolist()
        [[True, True, False], [True, False, False], [False, False, False]]
    """
    offsets = torch.arange(size - 1, -1, -1, device=episode_steps.device)
    return offsets > episode_steps.unsqueeze(-1)


def windows_at_every_step(x: Item, size: int, /, *, history: int = 0,
                          episode_steps: Tensor | None = None) -> TensorDict:
    """The window of ``size`` steps ending at each step of ``x`` ``[B, history + T, ...]`` after
    its first ``history``: ``INPUTS`` ``[B, T, size, ...]`` and ``PADDING_MASK`` ``[B, T, size]``
    per leaf, views of ``x`` when ``history >= size - 1``. ``episode_steps`` ``[B, T]``: each
    window's last step's index in its episode (default ``history + t``); padding is not zeroed.

    Examples:
        >>> obs = torch.tensor([[1.0, 2.0, 3.0]])
        >>> windows = windows_at_every_step(obs, 2, episode_steps=torch.tensor([[0, 1, 0]]))
        >>> windows["inputs"][0].tolist(), windows["padding_mask"][0, :, 0].tolist()
        ([[0.0, 1.0], [1.0, 2.0], [2.0, 3.0]], [True, False, True])
    """
    batch, length = _check_sequence(x, size)
    if not 0 <= history <= length - 1:
        raise ValueError(f"history must be in [0, {length - 1}] for {length} steps, got {history}")
    num_windows = length - history
    steps = history + torch.arange(num_windows, device=x.device).expand(batch, -1)
    if episode_steps is not None:
        if tuple(episode_steps.shape) != (batch, num_windows):
            raise ValueError(f"episode_steps must be [B, T] = {[batch, num_windows]}, "
                             f"got {list(episode_steps.shape)}")
        steps = torch.minimum(episode_steps.to(steps.dtype), steps)
    padding_mask = window_padding_mask(steps, size)
    missing = max(size - 1 - history, 0)

    def windows(t: Tensor) -> TensorDict:
        t = _pad_front(t, missing) if missing else t
        last = rolling_window(t, size)[:, t.shape[1] - size + 1 - num_windows:]
        return _windows_td(last, padding_mask)

    return _per_leaf(windows, x, [batch, num_windows])


def window_at_last_step(x: Item, size: int, /, *, episode_step: Tensor | None = None) -> TensorDict:
    """The window of ``size`` steps ending at the last step of ``x`` ``[B, L, ...]``, padding
    zeroed: TensorDict ``[B, size]`` of ``INPUTS`` and ``PADDING_MASK``, per leaf.
    ``episode_step`` ``[B]`` is the last step's index in its episode (default: ``L - 1``).

    Examples:
        >>> x = torch.tensor([[1.0, 2.0, 3.0]])
        >>> window_at_last_step(x, 3, episode_step=torch.tensor([1]))["inputs"]
        tensor([[0., 2., 3.]])
    """
    batch, _ = _check_sequence(x, size)
    if episode_step is not None:
        episode_padding = window_padding_mask(episode_step.reshape(batch), size)

    def window(t: Tensor) -> TensorDict:
        out = pad_last_sequence(t, size)
        if episode_step is not None:
            out[DataKeys.PADDING_MASK] = out[DataKeys.PADDING_MASK] | episode_padding
        return zero_padding(out)

    return _per_leaf(window, x, [batch, size])


def zero_padding(windows: TensorDict) -> TensorDict:
    """``windows`` (``INPUTS`` and ``PADDING_MASK``, nested or not) with padding zeroed."""
    out = windows.empty()
    for key, value in windows.items():
        if isinstance(value, TensorDict):
            value = zero_padding(value)
        elif key == DataKeys.INPUTS:
            mask = windows[DataKeys.PADDING_MASK]
            trailing = [1] * (value.dim() - mask.dim())
            value = value.masked_fill(mask.reshape(*mask.shape, *trailing), 0)
        out.set(key, value)
    return out


class View(Protocol):
    """Windows of ``size`` steps over ``[B, T, ...]``: at every step (``apply_all``, flattened),
    at the last (``apply_last``), and the steps ``apply_all`` drops (``drop_size``)."""

    @staticmethod
    def apply_all(x: Item, size: int, /) -> Item: ...

    @staticmethod
    def apply_last(x: Item, size: int, /) -> Item: ...

    @staticmethod
    def drop_size(size: int, /) -> int: ...


class RollingWindow:
    """Whole windows only: the first ``size - 1`` steps of every sequence end none."""

    @staticmethod
    def apply_all(x: Item, size: int, /) -> Item:
        """Every window, flattened into the batch: ``[B * (T - size + 1), size, ...]``.

        Examples:
            >>> RollingWindow.apply_all(torch.arange(6.0).reshape(2, 3), 2).tolist()
            [[0.0, 1.0], [1.0, 2.0], [3.0, 4.0], [4.0, 5.0]]
        """
        batch, num_steps = _check_sequence(x, size)
        windows = _per_leaf(lambda t: rolling_window(t, size), x, [batch, num_steps - size + 1])
        return windows.flatten(0, 1)

    @staticmethod
    def apply_last(x: Item, size: int, /) -> Item:
        """The last ``size`` steps of each sequence (all ``T`` when ``T < size``)."""
        _, num_steps = _check_sequence(x, size)
        return x[:, max(num_steps - size, 0):]

    @staticmethod
    def drop_size(size: int, /) -> int:
        return size - 1


class PaddedRollingWindow:
    """A window at every step, the first ones padded in front and masked."""

    @staticmethod
    def apply_all(x: Item, size: int, /) -> TensorDict:
        """The window ending at every step, flattened: TensorDict ``[B * T]`` (row ``b * T + t``)
        of ``INPUTS`` and ``PADDING_MASK``, per leaf."""
        return windows_at_every_step(x, size).reshape(-1)

    @staticmethod
    def apply_last(x: Item, size: int, /) -> TensorDict:
        """:func:`pad_last_sequence`, per leaf."""
        batch, _ = _check_sequence(x, size)
        return _per_leaf(lambda t: pad_last_sequence(t, size), x, [batch, size])

    @staticmethod
    def drop_size(size: int, /) -> int:
        return 0


_METHODS: dict[str, type[View]] = {
    "rolling_window": RollingWindow, "padded_rolling_window": PaddedRollingWindow,
}


class ViewRequirement:
    """The window a model wants for one (possibly nested) batch key: ``shift`` previous steps
    besides the current one; ``"padded_rolling_window"`` pads and masks the start of each
    sequence, ``"rolling_window"`` drops its first ``shift`` steps.

    Examples:
        >>> batch = TensorDict({"obs": torch.arange(6.0).reshape(2, 3, 1)}, batch_size=[2, 3])
        >>> view = ViewRequirement(shift=1)
        >>> view.apply_last("obs", batch)["inputs"].shape
        torch.Size([2, 2, 1])
        >>> view.apply_all("obs", batch)["inputs"].shape
        torch.Size([6, 2, 1])
    """

    def __init__(self, *, shift: int = 0, method: ViewMethod = "padded_rolling_window") -> None:
        name = type(self).__name__
        if isinstance(shift, bool) or not isinstance(shift, int) or shift < 0:
            raise ValueError(f"{name} `shift` must be a non-negative int, got {shift!r}")
        if method not in _METHODS:
            raise ValueError(f"{name} `method` must be one of {sorted(_METHODS)}, got {method!r}")
        self.shift = shift
        self.method = _METHODS[method]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shift={self.shift}, method={self.method.__name__})"

    def apply_all(self, key: str | tuple[str, ...], batch: TensorDict, /) -> Item:
        """The windows of ``batch[key]`` ``[B, T, ...]`` at every step, flattened (to train)."""
        item = batch[key]
        return self.method.apply_all(item, self.shift + 1) if self.shift else item.flatten(0, 1)

    def apply_last(self, key: str | tuple[str, ...], batch: TensorDict, /) -> Item:
        """The window of ``batch[key]`` ending at its last step (to act)."""
        item = batch[key]
        return self.method.apply_last(item, self.shift + 1) if self.shift else item[:, -1]

    @property
    def drop_size(self) -> int:
        """Steps at the start of each sequence that :meth:`apply_all` drops."""
        return self.method.drop_size(self.shift + 1)
