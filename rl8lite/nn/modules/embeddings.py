"""Sinusoidal positional embeddings for sequences."""

from __future__ import annotations

import math

import torch
from torch import nn

from .module import Module


class PositionalEmbedding(Module[[torch.Tensor], torch.Tensor]):
    """Adds fixed sinusoidal position codes to a sequence (Vaswani et al. 2017), so
    attention can tell its positions apart.

    Position ``p`` gets, at features ``2i`` and ``2i + 1``,

        sin(p / 10000^(2i / E)),  cos(p / 10000^(2i / E)).

    Args:
        embed_dim: Features ``E`` of the sequence (any, odd too).
        max_len: Longest sequence it embeds.
        dropout: Dropout probability on the output.

    Examples:
        >>> import torch
        >>> embedding = PositionalEmbedding(4, 10)
        >>> embedding(torch.zeros(1, 2, 4))[0, 0]
        tensor([0., 1., 0., 1.])
    """

    #: Dropout on the output.
    dropout: nn.Dropout
    #: Position codes, ``[1, max_len, embed_dim]`` (a buffer).
    pe: torch.Tensor

    def __init__(self, embed_dim: int, max_len: int, /, *, dropout: float = 0.0) -> None:
        super().__init__()
        positions = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
        frequencies = torch.exp(torch.arange(0, embed_dim, 2, dtype=torch.float32) * (-math.log(10_000.0) / embed_dim))
        angles = positions * frequencies
        pe = torch.empty(1, max_len, embed_dim)
        pe[0, :, 0::2] = torch.sin(angles)
        pe[0, :, 1::2] = torch.cos(angles[:, : embed_dim // 2])
        self.register_buffer("pe", pe)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x: torch.Tensor, /) -> torch.Tensor:
        """``x`` ``[B, T, E]`` plus the codes of positions ``0 .. T - 1`` (``T <= max_len``)."""
        if x.shape[1] > self.pe.shape[1]:
            raise ValueError(f"sequence of {x.shape[1]} steps is longer than max_len={self.pe.shape[1]}")
        return self.dropout(x + self.pe[:, : x.shape[1]])
