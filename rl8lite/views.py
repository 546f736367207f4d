"""Views: windows of past steps that a model asks for, per observation key (rl8's ``rl8.views``).

A model declares ``view_requirements = {key: ViewRequirement(shift=k)}`` and then sees, for
that key, the ``k + 1`` steps ending at the current one instead of the current step alone.
On a batch ``[B, T, ...]`` (``B`` copies of an env, ``T`` steps) a view is applied in one
of two ways:

- ``apply_last``: the window ending at the last step of each copy (to sample actions);
- ``apply_all``: the window ending at every step, flattened into the batch (to train).

and by one of two methods: ``"rolling_window"`` keeps whole windows only, dropping the
first ``k`` steps of every sequence; ``"padded_rolling_window"`` (the default) puts zeros
in front of the sequence and says which steps are padding: the item becomes a TensorDict
with the window under ``DataKeys.INPUTS`` and a boolean ``DataKeys.PADDING_MASK``,
``True`` at padding. The windows themselves are built in :mod:`rl8lite.windows`.
"""

from __future__ import annotations

from typing import Literal, Protocol

from tensordict import TensorDict

from .windows import (
    Item,
    check_sequence,
    pad_last_sequence,
    pad_whole_sequence,
    per_leaf,
    rolling_window,
    windows_at_every_step,
)

__all__ = [
    "PaddedRollingWindow", "RollingWindow", "View", "ViewKind", "ViewMethod", "ViewRequirement",
    "pad_last_sequence", "pad_whole_sequence", "rolling_window",
]

ViewKind = Literal["last", "all"]
ViewMethod = Literal["rolling_window", "padded_rolling_window"]


class View(Protocol):
    """How a view requirement turns a batch ``[B, T, ...]`` into windows of ``size`` steps."""

    @staticmethod
    def apply_all(x: Item, size: int, /) -> Item:
        """The windows ending at every step, as a batch ``[B_NEW, size, ...]`` with ``B_NEW <= B * T``."""

    @staticmethod
    def apply_last(x: Item, size: int, /) -> Item:
        """The window ending at the last step of each of the ``B`` sequences: ``[B, size, ...]``."""

    @staticmethod
    def drop_size(size: int, /) -> int:
        """Steps at the start of each sequence that ``apply_all`` makes no window for."""


class RollingWindow:
    """The windows that fit whole in each sequence, without padding: the first
    ``size - 1`` steps of every sequence end no window (:meth:`drop_size`)."""

    @staticmethod
    def apply_all(x: Item, size: int, /) -> Item:
        """Every window of ``size`` steps, flattened into the batch.

        Args:
            x: Tensor or TensorDict ``[B, T, ...]``.
            size: Steps per window.

        Returns:
            ``[B * (T - size + 1), size, ...]``, the windows of sequence ``b`` at rows
            ``b * (T - size + 1) ...``; a new tensor (flattening overlapping windows
            copies them; :func:`rolling_window` is the view).

        Examples:
            >>> import torch
            >>> RollingWindow.apply_all(torch.arange(6.0).reshape(2, 3), 2)
            tensor([[0., 1.],
                    [1., 2.],
                    [3., 4.],
                    [4., 5.]])
        """
        batch, num_steps = check_sequence(x, size)
        windows = per_leaf(lambda t: rolling_window(t, size), x, [batch, num_steps - size + 1])
        if isinstance(windows, TensorDict):
            return windows.reshape(-1)
        return windows.reshape(-1, *windows.shape[2:])

    @staticmethod
    def apply_last(x: Item, size: int, /) -> Item:
        """The last ``size`` steps of each sequence (all ``T`` when ``T < size``).

        Args:
            x: Tensor or TensorDict ``[B, T, ...]``.
            size: Steps wanted.

        Returns:
            ``[B, min(T, size), ...]``, a view of ``x``.

        Examples:
            >>> import torch
            >>> RollingWindow.apply_last(torch.arange(6.0).reshape(2, 3), 2)
            tensor([[1., 2.],
                    [4., 5.]])
        """
        _, num_steps = check_sequence(x, size)
        return x[:, max(num_steps - size, 0):]

    @staticmethod
    def drop_size(size: int, /) -> int:
        """``size - 1``: the steps of each sequence that end no whole window."""
        return size - 1


class PaddedRollingWindow:
    """Windows ending at every step, the first ones padded with zeros in front and
    masked, so that no step is dropped (:meth:`drop_size` is 0)."""

    @staticmethod
    def apply_all(x: Item, size: int, /) -> TensorDict:
        """The window of ``size`` steps ending at every step, flattened into the batch.

        Args:
            x: Tensor or TensorDict ``[B, T, ...]``.
            size: Steps per window.

        Returns:
            TensorDict ``[B * T, size]`` (new tensors): ``INPUTS`` ``[B * T, size, ...]``,
            row ``b * T + t`` the window ending at step ``t`` of sequence ``b``, and
            ``PADDING_MASK`` ``[B * T, size]``. A TensorDict ``x`` gives a TensorDict
            ``[B * T]`` with one such pair per leaf.

        Examples:
            >>> import torch
            >>> out = PaddedRollingWindow.apply_all(torch.tensor([[1.0, 2.0]]), 2)
            >>> out["inputs"], out["padding_mask"]
            (tensor([[0., 1.],
                    [1., 2.]]), tensor([[ True, False],
                    [False, False]]))
        """
        return windows_at_every_step(x, size).reshape(-1)

    @staticmethod
    def apply_last(x: Item, size: int, /) -> TensorDict:
        """The last ``size`` steps of each sequence, padded in front to ``size``
        (:func:`pad_last_sequence`, per leaf of a TensorDict).

        Args:
            x: Tensor or TensorDict ``[B, T, ...]``.
            size: Steps wanted.

        Returns:
            TensorDict ``[B, size]`` with ``INPUTS`` ``[B, size, ...]`` (a view of ``x``
            when ``T >= size``) and ``PADDING_MASK`` ``[B, size]``, per leaf for a TensorDict.

        Examples:
            >>> import torch
            >>> PaddedRollingWindow.apply_last(torch.tensor([[1.0, 2.0]]), 3)["inputs"]
            tensor([[0., 1., 2.]])
        """
        batch, _ = check_sequence(x, size)
        return per_leaf(lambda t: pad_last_sequence(t, size), x, [batch, size])

    @staticmethod
    def drop_size(size: int, /) -> int:
        """0: padding gives every step a window."""
        return 0


_METHODS: dict[str, type[View]] = {
    "rolling_window": RollingWindow,
    "padded_rolling_window": PaddedRollingWindow,
}


class ViewRequirement:
    """The window of past steps a model wants for one (possibly nested) batch key.

    Args:
        shift: Previous steps to include besides the current one (window of
            ``shift + 1`` steps); ``0`` is the current step alone.
        method: ``"padded_rolling_window"`` (pad and mask the start of each sequence,
            so every step gets a window) or ``"rolling_window"`` (drop the first
            ``shift`` steps of each sequence instead).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"obs": torch.arange(6.0).reshape(2, 3, 1)}, batch_size=[2, 3])
        >>> view = ViewRequirement(shift=1)
        >>> view.apply_last("obs", batch)["inputs"].shape
        torch.Size([2, 2, 1])
        >>> view.apply_all("obs", batch)["inputs"].shape
        torch.Size([6, 2, 1])
    """

    #: Previous steps included besides the current one.
    shift: int
    #: :class:`RollingWindow` or :class:`PaddedRollingWindow`.
    method: type[View]

    def __init__(self, *, shift: int = 0, method: ViewMethod = "padded_rolling_window") -> None:
        if isinstance(shift, bool) or not isinstance(shift, int) or shift < 0:
            raise ValueError(f"{type(self).__name__} `shift` must be a non-negative int, got {shift!r}")
        if method not in _METHODS:
            raise ValueError(f"{type(self).__name__} `method` must be one of {sorted(_METHODS)}, got {method!r}")
        self.shift = shift
        self.method = _METHODS[method]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shift={self.shift}, method={self.method.__name__})"

    def apply_all(self, key: str | tuple[str, ...], batch: TensorDict, /) -> Item:
        """The view of ``batch[key]`` at every step, flattened into the batch (training).

        Args:
            key: A key of ``batch``; a tuple of strings reaches a nested entry.
            batch: TensorDict ``[B, T, ...]``.

        Returns:
            With ``shift == 0``, ``batch[key]`` as ``[B * T, ...]``; else
            ``self.method.apply_all(batch[key], shift + 1)``: ``[B_NEW, shift + 1, ...]``
            with ``B_NEW = B * T`` (padded) or ``B * (T - shift)`` (rolling).
        """
        item = batch[key]
        if not self.shift:
            return item.reshape(-1) if isinstance(item, TensorDict) else item.flatten(0, 1)
        return self.method.apply_all(item, self.shift + 1)

    def apply_last(self, key: str | tuple[str, ...], batch: TensorDict, /) -> Item:
        """The view of ``batch[key]`` ending at its last step (sampling).

        Args:
            key: A key of ``batch``; a tuple of strings reaches a nested entry.
            batch: TensorDict ``[B, T, ...]``.

        Returns:
            With ``shift == 0``, the last step ``[B, ...]``; else
            ``self.method.apply_last(batch[key], shift + 1)``: ``[B, shift + 1, ...]``.
        """
        item = batch[key]
        if not self.shift:
            return item[:, -1]
        return self.method.apply_last(item, self.shift + 1)

    @property
    def drop_size(self) -> int:
        """Steps at the start of each sequence that :meth:`apply_all` drops."""
        return self.method.drop_size(self.shift + 1)
