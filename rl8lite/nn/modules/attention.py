"""Attention layers: pre-norm transformer blocks, perceivers, and the pointer network.

Masks are :class:`torch.nn.MultiheadAttention`'s: ``key_padding_mask`` ``[B, K]`` is ``True``
at padding, ``attention_mask`` ``[Q, K]`` ``True`` (or ``-inf``) where a query may not attend.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from ..functional import masked_log_softmax
from .layers import Module, SequentialSkipConnection, get_activation

__all__ = [
    "CrossAttention", "PerceiverIOLayer", "PerceiverLayer", "PointerNetwork", "SelfAttention",
    "SelfAttentionStack",
]

_Mask = Tensor | None


class _AttentionBlock(nn.Module):
    """``attention(norm(inputs))`` joined to the queries, then ``LayerNorm -> Linear ->
    activation -> Dropout -> Linear`` joined to its input."""

    _norms: tuple[str, ...] = ()  # attribute names of the input layer norms

    def __init__(self, embed_dim: int, /, num_heads: int = 2, hidden_dim: int = 128,
                 activation_fn: str = "relu", attention_dropout: float = 0.0,
                 hidden_dropout: float = 0.0, skip_kind: str | None = "cat") -> None:
        super().__init__()
        for name in self._norms:
            setattr(self, name, nn.LayerNorm(embed_dim))
        self.attention = nn.MultiheadAttention(embed_dim, num_heads, dropout=attention_dropout,
                                               batch_first=True)
        self.skip_connection = SequentialSkipConnection(embed_dim, kind=skip_kind)
        self.skip_connection.append(nn.Sequential(
            nn.LayerNorm(embed_dim),
            nn.Linear(embed_dim, hidden_dim),
            get_activation(activation_fn),
            nn.Dropout(p=hidden_dropout),
            nn.Linear(hidden_dim, embed_dim),
        ))

    def _block(self, q: Tensor, normed_q: Tensor, normed_kv: Tensor, key_padding_mask: _Mask,
               attention_mask: _Mask) -> Tensor:
        attended, _ = self.attention(normed_q, normed_kv, normed_kv, need_weights=False,
                                     key_padding_mask=key_padding_mask, attn_mask=attention_mask)
        return self.skip_connection(q, attended)


class CrossAttention(_AttentionBlock, Module[[Tensor, Tensor, _Mask, _Mask], Tensor]):
    """Queries attend to a sequence of keys/values, then a feedforward network of
    ``hidden_dim`` features; ``num_heads`` must divide ``embed_dim``, ``skip_kind`` is
    ``"cat"``, ``"residual"`` or ``None``.

    Examples:
        >>> block = CrossAttention(8, num_heads=2, hidden_dim=16)
        >>> block(torch.randn(3, 2, 8), torch.randn(3, 5, 8)).shape
        torch.Size([3, 2, 8])
    """

    _norms = ("q_norm", "kv_norm")

    def forward(self, q: Tensor, kv: Tensor, key_padding_mask: _Mask = None,
                attention_mask: _Mask = None) -> Tensor:
        """``q`` ``[B, Q, E]`` after attending to ``kv`` ``[B, K, E]``: ``[B, Q, E]``."""
        return self._block(q, self.q_norm(q), self.kv_norm(kv), key_padding_mask, attention_mask)


class SelfAttention(_AttentionBlock, Module[[Tensor, _Mask, _Mask], Tensor]):
    """A sequence attends to itself, then a feedforward network (a pre-norm transformer
    layer); arguments as :class:`CrossAttention`'s.

    Examples:
        >>> block = SelfAttention(8, num_heads=2, hidden_dim=16, skip_kind="residual")
        >>> padding = torch.tensor([[True, False, False]])
        >>> block(torch.randn(1, 3, 8), key_padding_mask=padding).shape
        torch.Size([1, 3, 8])
    """

    _norms = ("x_norm",)

    def forward(self, x: Tensor, key_padding_mask: _Mask = None,
                attention_mask: _Mask = None) -> Tensor:
        """``x`` ``[B, X, E]`` after attending to itself: ``[B, X, E]``."""
        normed = self.x_norm(x)
        return self._block(x, normed, normed, key_padding_mask, attention_mask)


class SelfAttentionStack(Module[[Tensor, _Mask, _Mask], Tensor]):
    """``module`` applied ``num_layers`` times with the same masks; with ``share_parameters``
    every layer is ``module`` itself, else a copy.

    Examples:
        >>> stack = SelfAttentionStack(SelfAttention(8, hidden_dim=16), 3, share_parameters=True)
        >>> stack.layers[0] is stack.layers[2], stack(torch.randn(2, 4, 8)).shape
        (True, torch.Size([2, 4, 8]))
    """

    def __init__(self, module: SelfAttention, num_layers: int, /, *,
                 share_parameters: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [module if share_parameters else copy.deepcopy(module) for _ in range(num_layers)]
        )

    def forward(self, x: Tensor, key_padding_mask: _Mask = None,
                attention_mask: _Mask = None) -> Tensor:
        """Every layer on ``x`` ``[B, X, E]`` in turn: ``[B, X, E]``."""
        for layer in self.layers:
            x = layer(x, key_padding_mask=key_padding_mask, attention_mask=attention_mask)
        return x


class PerceiverLayer(Module[[Tensor, Tensor, _Mask, _Mask], Tensor]):
    """A latent array cross-attends to an input sequence of any length, then self-attends
    ``num_layers`` times (`Perceiver <https://arxiv.org/abs/2103.03206>`_); ``**block`` are
    :class:`CrossAttention`'s keywords, for every block.

    Examples:
        >>> layer = PerceiverLayer(8, hidden_dim=16)
        >>> layer(torch.randn(2, 4, 8), torch.randn(2, 10, 8)).shape
        torch.Size([2, 4, 8])
    """

    def __init__(self, embed_dim: int, /, *, num_layers: int = 2,
                 share_parameters: bool = False, **block: Any) -> None:
        super().__init__()
        self.cross_attention = CrossAttention(embed_dim, **block)
        self.self_attention = SelfAttentionStack(
            SelfAttention(embed_dim, **block), num_layers, share_parameters=share_parameters
        )

    def forward(self, q: Tensor, kv: Tensor, key_padding_mask: _Mask = None,
                attention_mask: _Mask = None) -> Tensor:
        """The latent array ``q`` ``[B, Q, E]`` after attending to ``kv`` ``[B, K, E]``."""
        return self.self_attention(self.cross_attention(q, kv, key_padding_mask, attention_mask))


class PerceiverIOLayer(Module[[Tensor, Tensor, _Mask, _Mask], Tensor]):
    """A :class:`PerceiverLayer` read out by a learned query of ``output_seq_dim`` elements
    (`Perceiver IO <https://arxiv.org/abs/2107.14795>`_): ``[B, output_seq_dim, E]`` out.

    Examples:
        >>> layer = PerceiverIOLayer(8, 3, hidden_dim=16)
        >>> layer(torch.randn(2, 4, 8), torch.randn(2, 10, 8)).shape
        torch.Size([2, 3, 8])
    """

    def __init__(self, embed_dim: int, output_seq_dim: int, /, *, num_layers: int = 2,
                 share_parameters: bool = False, **block: Any) -> None:
        super().__init__()
        self.perceiver_layer = PerceiverLayer(embed_dim, num_layers=num_layers,
                                              share_parameters=share_parameters, **block)
        query = torch.empty(output_seq_dim, embed_dim)
        self.output_query = nn.Parameter(nn.init.xavier_uniform_(query))
        self.decoder = CrossAttention(embed_dim, **block)

    def forward(self, q: Tensor, kv: Tensor, key_padding_mask: _Mask = None,
                attention_mask: _Mask = None) -> Tensor:
        """The latent array ``q`` ``[B, Q, E]`` after attending to ``kv``, read out."""
        latent = self.perceiver_layer(q, kv, key_padding_mask, attention_mask)
        return self.decoder(self.output_query.expand(q.shape[0], -1, -1), latent)


class PointerNetwork(Module[[Tensor, Tensor, _Mask], Tensor]):
    """Additive attention scoring every encoder element as the next to point at, per decoder
    step (Vinyals et al. 2015), log-softmaxed over the allowed ``e``::

        score[b, d, e] = v . tanh(W1 encoder_out[b, e] + W2 decoder_out[b, d])

    Examples:
        >>> pointer = PointerNetwork(8)
        >>> mask = torch.tensor([[[True, True, False]]])
        >>> logp = pointer(torch.randn(1, 1, 8), torch.randn(1, 3, 8), mask)
        >>> logp.shape, round(logp.exp().sum().item(), 4), logp.exp()[0, 0, 2].item()
        (torch.Size([1, 1, 3]), 1.0, 0.0)
    """

    def __init__(self, embed_dim: int, /) -> None:
        super().__init__()
        self.W1 = nn.Linear(embed_dim, embed_dim, bias=False)
        self.W2 = nn.Linear(embed_dim, embed_dim, bias=False)
        self.VT = nn.Linear(embed_dim, 1, bias=False)

    def forward(self, decoder_out: Tensor, encoder_out: Tensor, mask: _Mask = None) -> Tensor:
        """``[B, D, E]`` log-probabilities of pointing at each encoder element, given
        ``decoder_out`` ``[B, D, C]``, ``encoder_out`` ``[B, E, C]`` and a valid ``mask``."""
        blended = torch.tanh(self.W2(decoder_out).unsqueeze(2) + self.W1(encoder_out).unsqueeze(1))
        return masked_log_softmax(self.VT(blended).squeeze(-1), mask=mask, dim=-1)
