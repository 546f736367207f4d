"""The multi-layer perceptron models are built from."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import torch
from torch import nn

from .activations import get_activation
from .module import Module


class MLP(nn.Sequential, Module[[torch.Tensor], torch.Tensor]):
    """Linear layers, each but the last followed by an optional norm, the activation and
    an optional dropout: ``Linear -> [norm] -> activation -> [Dropout] -> ... -> Linear``.

    Args:
        input_dim: Input features.
        hiddens: Output features of each linear layer; the last is the MLP's output
            (no activation after it).
        activation_fn: Name of the activation (:func:`get_activation`).
        norm_layer: Norm class built with a layer's width (e.g. ``nn.LayerNorm``,
            ``nn.BatchNorm1d``), right after each hidden linear layer.
        bias: Linear layers have biases.
        dropout: Dropout probability after each hidden activation (none at 0).
        inplace: Activations work in place (for those that can).

    Examples:
        >>> import torch
        >>> mlp = MLP(4, [8, 2], norm_layer=torch.nn.LayerNorm)
        >>> [type(layer).__name__ for layer in mlp]
        ['Linear', 'LayerNorm', 'ReLU', 'Linear']
        >>> mlp(torch.zeros(3, 4)).shape
        torch.Size([3, 2])
    """

    def __init__(
        self,
        input_dim: int,
        hiddens: Sequence[int],
        /,
        *,
        activation_fn: str = "relu",
        norm_layer: type[nn.BatchNorm1d | nn.LayerNorm] | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        inplace: bool = False,
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
