"""Activation functions by name (rl8's registry), and the squared ReLU."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .module import Module


class SquaredReLU(Module[[torch.Tensor], torch.Tensor]):
    """``relu(x) ** 2`` (So et al. 2021, "Primer", arXiv:2109.08668).

    Examples:
        >>> import torch
        >>> SquaredReLU()(torch.tensor([-1.0, 3.0]))
        tensor([0., 9.])
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x).square()


#: Activation classes by the names :func:`get_activation` takes.
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "hard_shrink": nn.Hardshrink,
    "hard_sigmoid": nn.Hardsigmoid,
    "hard_swish": nn.Hardswish,
    "hard_tanh": nn.Hardtanh,
    "identity": nn.Identity,
    "leaky_relu": nn.LeakyReLU,
    "log_sigmoid": nn.LogSigmoid,
    "log_softmax": nn.LogSoftmax,
    "relu": nn.ReLU,
    "relu6": nn.ReLU6,
    "selu": nn.SELU,
    "sigmoid": nn.Sigmoid,
    "softmax": nn.Softmax,
    "squared_relu": SquaredReLU,
    "swish": nn.SiLU,
    "tanh": nn.Tanh,
}


def get_activation(name: str, /, **params: Any) -> nn.Module:
    """A new activation module by its name in :data:`ACTIVATIONS`.

    Args:
        name: E.g. ``"relu"``, ``"swish"``, ``"squared_relu"``.
        **params: The activation class's own arguments (e.g. ``negative_slope=0.1``).

    Returns:
        An instance of ``ACTIVATIONS[name]``.

    Raises:
        ValueError: For a name that is not in :data:`ACTIVATIONS`.

    Examples:
        >>> get_activation("leaky_relu", negative_slope=0.1)
        LeakyReLU(negative_slope=0.1)
    """
    if name not in ACTIVATIONS:
        raise ValueError(f"no activation named {name!r}: choose one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name](**params)
