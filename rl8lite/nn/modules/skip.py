"""Skip connections around a chain of layers."""

from __future__ import annotations

import torch
from torch import nn

from ..functional import SKIP_KINDS, skip_connection
from .module import Module


class SequentialSkipConnection(Module[[torch.Tensor, torch.Tensor], torch.Tensor]):
    """A chain of layers, each joined to its own input by a skip connection.

    ``forward(x, y)`` first joins a seed ``x`` to ``y`` (e.g. a block's input to its
    attention output), then for each appended layer ``f`` sets ``y = join(y, f(y))``.
    With ``kind="cat"`` every join concatenates features and a linear "fan-in" layer maps
    the ``2 * embed_dim`` features back to ``embed_dim``; ``"residual"`` adds; ``None``
    keeps ``f(y)`` alone. The output always has ``embed_dim`` features.

    Args:
        embed_dim: Features of ``x``, ``y`` and every layer's input and output.
        kind: ``"cat"``, ``"residual"`` or ``None`` (see :func:`~rl8lite.nn.skip_connection`).

    Examples:
        >>> import torch
        >>> skip = SequentialSkipConnection(4, kind="residual")
        >>> skip.append(torch.nn.Linear(4, 4))
        4
        >>> skip(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)).shape
        torch.Size([2, 3, 4])
    """

    #: ``"cat"``, ``"residual"`` or ``None``.
    kind: str | None

    def __init__(self, embed_dim: int, kind: str | None = "cat") -> None:
        super().__init__()
        if kind not in SKIP_KINDS:
            raise ValueError(f"no skip connection kind {kind!r}: choose one of {list(SKIP_KINDS)}")
        self.kind = kind
        self._embed_dim = embed_dim
        # [fan-in of the seed join, layer 1, its fan-in, layer 2, its fan-in, ...]
        self._layers = nn.ModuleList([self._fan_in()])

    def _fan_in(self) -> nn.Module:
        if self.kind == "cat":
            return nn.Linear(2 * self._embed_dim, self._embed_dim)
        return nn.Identity()

    def append(self, module: nn.Module, /) -> int:
        """Add ``module`` (``embed_dim`` features in and out) to the end of the chain.

        Returns:
            :attr:`out_features`.
        """
        self._layers.append(module)
        self._layers.append(self._fan_in())
        return self.out_features

    def forward(self, x: torch.Tensor, y: torch.Tensor, /) -> torch.Tensor:
        """Join ``x`` and ``y`` (``[B, T, embed_dim]`` each), then run the chain.

        Returns:
            ``[B, T, embed_dim]``.
        """
        y = self._layers[0](skip_connection(x, y, kind=self.kind))
        for layer, fan_in in zip(self._layers[1::2], self._layers[2::2]):
            y = fan_in(skip_connection(y, layer(y), kind=self.kind))
        return y

    @property
    def in_features(self) -> int:
        """Features of the inputs (``embed_dim``)."""
        return self._embed_dim

    @property
    def out_features(self) -> int:
        """Features of the output (``embed_dim``, whatever the kind)."""
        return self._embed_dim
