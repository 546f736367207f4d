"""The typed module base, activations by name, and the layers that do not attend."""

from __future__ import annotations

import math
from abc import ABCMeta, abstractmethod
from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from ..functional import check_skip_kind, skip_connection

__all__ = [
    "ACTIVATIONS", "MLP", "Module", "PositionalEmbedding", "SequentialSkipConnection",
    "SquaredReLU", "get_activation",
]

_P = ParamSpec("_P")
_T = TypeVar("_T")


class Module(nn.Module, Generic[_P, _T], metaclass=ABCMeta):
    """A :class:`torch.nn.Module` whose call signature a type checker knows:
    ``Module[[torch.Tensor], torch.Tensor]`` takes a tensor and returns one.

    Examples:
        >>> class Double(Module[[torch.Tensor], torch.Tensor]):
        ...     def forward(self, x: torch.Tensor) -> torch.Tensor:
        ...         return 2 * x
        >>> Double()(torch.ones(2))
        tensor([2., 2.])
    """

    if TYPE_CHECKING:  # at run time, nn.Module's __call__ (hooks)
        def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _T: ...

    @abstractmethod
    def forward(self, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """The module's computation."""


class SquaredReLU(Module[[torch.Tensor], torch.Tensor]):
    """``relu(x) ** 2`` (So et al. 2021, "Primer", arXiv:2109.08668).

    Examples:
        >>> SquaredReLU()(torch.tensor([-1.0, 3.0]))
        tensor([0., 9.])
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x).square()


#: Activation classes by the names :func:`get_activation` takes.
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "elu": nn.ELU, "gelu": nn.GELU, "hard_shrink": nn.Hardshrink, "hard_sigmoid": nn.Hardsigmoid,
    "hard_swish": nn.Hardswish, "hard_tanh": nn.Hardtanh, "identity": nn.Identity,
    "leaky_relu": nn.LeakyReLU, "log_sigmoid": nn.LogSigmoid, "log_softmax": nn.LogSoftmax,
    "relu": nn.ReLU, "relu6": nn.ReLU6, "selu": nn.SELU, "sigmoid": nn.Sigmoid,
    "softmax": nn.Softmax, "squared_relu": SquaredReLU, "swish": nn.SiLU, "tanh": nn.Tanh,
}


def get_activation(name: str, /, **params: Any) -> nn.Module:
    """A new ``ACTIVATIONS[name]`` built with ``params``; a ``ValueError`` for another name.

    Examples:
        >>> get_activation("leaky_relu", negative_slope=0.1)
        LeakyReLU(negative_slope=0.1)
    """
    if name not in ACTIVATIONS:
        raise ValueError(f"no activation named {name!r}: choose one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name](**params)


class MLP(nn.Sequential, Module[[torch.Tensor], torch.Tensor]):
    """``Linear -> [norm] -> activation -> [Dropout] -> ... -> Linear``, ``hiddens`` the
    output features of each linear layer, ``norm_layer`` a class (e.g. ``nn.LayerNorm``)
    built with each hidden width, ``dropout`` after each hidden activation (none at 0).

    Examples:
        >>> mlp = MLP(4, [8, 2], norm_layer=torch.nn.LayerNorm)
        >>> [type(layer).__name__ for layer in mlp]
        ['Linear', 'LayerNorm', 'ReLU', 'Linear']
        >>> mlp(torch.zeros(3, 4)).shape
        torch.Size([3, 2])
    """

    def __init__(
        self, input_dim: int, hiddens: Sequence[int], /, *, activation_fn: str = "relu",
        norm_layer: type[nn.BatchNorm1d | nn.LayerNorm] | None = None, bias: bool = True,
        dropout: float = 0.0, inplace: bool = False,
    ) -> None:
        if not hiddens:
            raise ValueError("an MLP needs at least one layer: hiddens is empty")
        widths = [input_dim, *hiddens]
        layers: list[nn.Module] = []
        for in_features, out_features in pairwise(widths[:-1]):
            layers.append(nn.Linear(in_features, out_features, bias=bias))
            if norm_layer is not None:
                layers.append(norm_layer(out_features))
            layers.append(get_activation(activation_fn, **({"inplace": True} if inplace else {})))
            if dropout:
                layers.append(nn.Dropout(p=dropout))
        layers.append(nn.Linear(widths[-2], widths[-1], bias=bias))
        super().__init__(*layers)


class SequentialSkipConnection(Module[[torch.Tensor, torch.Tensor], torch.Tensor]):
    """A chain of layers, each joined to its input by a skip connection: ``forward(x, y)``
    joins ``x`` to ``y``, then sets ``y = join(y, f(y))`` for each appended layer ``f``.
    ``"cat"`` concatenates then maps ``2 * embed_dim`` features back to ``embed_dim``
    (a linear layer); ``"residual"`` adds; ``None`` keeps ``f(y)``.

    Examples:
        >>> skip = SequentialSkipConnection(4, kind="residual")
        >>> skip.append(torch.nn.Linear(4, 4))
        4
        >>> skip(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)).shape
        torch.Size([2, 3, 4])
    """

    kind: str | None

    def __init__(self, embed_dim: int, kind: str | None = "cat") -> None:
        super().__init__()
        check_skip_kind(kind)
        self.kind = kind
        self._embed_dim = embed_dim
        # [fan-in of the first join, layer 1, its fan-in, layer 2, its fan-in, ...]
        self._layers = nn.ModuleList([self._fan_in()])

    def _fan_in(self) -> nn.Module:
        if self.kind == "cat":
            return nn.Linear(2 * self._embed_dim, self._embed_dim)
        return nn.Identity()

    def append(self, module: nn.Module, /) -> int:
        """Add ``module`` (``embed_dim`` features in and out); returns :attr:`out_features`."""
        self._layers.append(module)
        self._layers.append(self._fan_in())
        return self.out_features

    def forward(self, x: torch.Tensor, y: torch.Tensor, /) -> torch.Tensor:
        """Join ``x`` and ``y`` (``[B, T, embed_dim]`` each), then run the chain."""
        y = self._layers[0](skip_connection(x, y, kind=self.kind))
        for layer, fan_in in zip(self._layers[1::2], self._layers[2::2]):
            y = fan_in(skip_connection(y, layer(y), kind=self.kind))
        return y

    @property
    def in_features(self) -> int:
        return self._embed_dim

    @property
    def out_features(self) -> int:
        return self._embed_dim


class PositionalEmbedding(Module[[torch.Tensor], torch.Tensor]):
    """Adds fixed sinusoidal position codes to sequences of up to ``max_len`` steps (Vaswani
    et al. 2017): position ``p`` gets ``sin(p / 10000^(2i / E))`` at feature ``2i`` and
    ``cos(...)`` at ``2i + 1``; ``dropout`` applies to the output.

    Examples:
        >>> PositionalEmbedding(4, 10)(torch.zeros(1, 2, 4))[0, 0]
        tensor([0., 1., 0., 1.])
    """

    pe: torch.Tensor  # [1, max_len, embed_dim]

    def __init__(self, embed_dim: int, max_len: int, /, *, dropout: float = 0.0) -> None:
        super().__init__()
        positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
        rate = -math.log(10_000.0) / embed_dim
        angles = positions * torch.exp(torch.arange(0, embed_dim, 2, dtype=torch.float32) * rate)
        pe = torch.empty(1, max_len, embed_dim)
        pe[0, :, 0::2] = torch.sin(angles)
        pe[0, :, 1::2] = torch.cos(angles[:, : embed_dim // 2])
        self.register_buffer("pe", pe)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x: torch.Tensor, /) -> torch.Tensor:
        """``x`` ``[B, T, E]`` plus the codes of positions ``0 .. T - 1``."""
        if x.shape[1] > (max_len := self.pe.shape[1]):
            raise ValueError(f"sequence of {x.shape[1]} steps is longer than max_len={max_len}")
        return self.dropout(x + self.pe[:, : x.shape[1]])
