"""Pre-norm transformer blocks: cross-attention, self-attention and stacks of it.

Each block is ``attention(norm(inputs))`` joined to its queries by a skip connection,
then a feedforward network ``LayerNorm -> Linear -> activation -> Dropout -> Linear``
joined to its own input the same way (:class:`SequentialSkipConnection`). Masks follow
:class:`torch.nn.MultiheadAttention`: ``key_padding_mask`` ``[B, K]`` is ``True`` at
padding (a view's ``DataKeys.PADDING_MASK`` as it is), ``attention_mask`` ``[Q, K]`` is
``True`` (or ``-inf``) where a query may not attend to a key.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from .activations import get_activation
from .module import Module
from .pointer import PointerNetwork
from .skip import SequentialSkipConnection

__all__ = ["CrossAttention", "PointerNetwork", "SelfAttention", "SelfAttentionStack"]

_Mask = torch.Tensor | None


def _feedforward(embed_dim: int, hidden_dim: int, activation_fn: str, dropout: float) -> nn.Sequential:
    return nn.Sequential(
        nn.LayerNorm(embed_dim),
        nn.Linear(embed_dim, hidden_dim),
        get_activation(activation_fn),
        nn.Dropout(p=dropout),
        nn.Linear(hidden_dim, embed_dim),
    )


class _AttentionBlock(nn.Module):
    """What both blocks hold: layer norms of their inputs, multihead attention and the
    skip-connected feedforward network; the arguments are documented on each block."""

    #: Attribute names of the blocks' input layer norms.
    _norms: tuple[str, ...] = ()
    #: The multihead attention (``batch_first``).
    attention: nn.MultiheadAttention
    #: Joins the queries, the attention output and the feedforward network.
    skip_connection: SequentialSkipConnection

    def __init__(
        self,
        embed_dim: int,
        /,
        num_heads: int = 2,
        hidden_dim: int = 128,
        activation_fn: str = "relu",
        attention_dropout: float = 0.0,
        hidden_dropout: float = 0.0,
        skip_kind: str | None = "cat",
    ) -> None:
        super().__init__()
        for name in self._norms:
            setattr(self, name, nn.LayerNorm(embed_dim))
        self.attention = nn.MultiheadAttention(embed_dim, num_heads, dropout=attention_dropout, batch_first=True)
        self.skip_connection = SequentialSkipConnection(embed_dim, kind=skip_kind)
        self.skip_connection.append(_feedforward(embed_dim, hidden_dim, activation_fn, hidden_dropout))

    def _attend(self, q: torch.Tensor, kv: torch.Tensor, key_padding_mask: _Mask, attention_mask: _Mask) -> torch.Tensor:
        out, _ = self.attention(q, kv, kv, key_padding_mask=key_padding_mask, attn_mask=attention_mask,
                                need_weights=False)
        return out


class CrossAttention(_AttentionBlock, Module[[torch.Tensor, torch.Tensor, _Mask, _Mask], torch.Tensor]):
    """A sequence of queries attends to a sequence of keys/values, then a feedforward network.

    ``out = skip(q, attention(q_norm(q), kv_norm(kv)))`` followed by the feedforward
    network, each joined by ``skip_kind``.

    Args:
        embed_dim: Features ``E`` of queries and keys.
        num_heads: Attention heads (must divide ``embed_dim``).
        hidden_dim: Hidden features of the feedforward network.
        activation_fn: Its activation's name (:func:`~rl8lite.nn.get_activation`).
        attention_dropout: Dropout on the attention weights.
        hidden_dropout: Dropout inside the feedforward network.
        skip_kind: ``"cat"``, ``"residual"`` or ``None`` (:class:`SequentialSkipConnection`).

    Examples:
        >>> import torch
        >>> block = CrossAttention(8, num_heads=2, hidden_dim=16)
        >>> block(torch.randn(3, 2, 8), torch.randn(3, 5, 8)).shape
        torch.Size([3, 2, 8])
    """

    _norms = ("q_norm", "kv_norm")
    #: Norm of the queries.
    q_norm: nn.LayerNorm
    #: Norm of the keys/values.
    kv_norm: nn.LayerNorm

    def forward(
        self, q: torch.Tensor, kv: torch.Tensor, key_padding_mask: _Mask = None, attention_mask: _Mask = None
    ) -> torch.Tensor:
        """Attend queries ``q`` ``[B, Q, E]`` to ``kv`` ``[B, K, E]``.

        Args:
            q: Queries.
            kv: Keys (also the values).
            key_padding_mask: ``[B, K]``, ``True`` at padding elements of ``kv``.
            attention_mask: ``[Q, K]``, ``True`` where a query may not attend to a key.

        Returns:
            ``[B, Q, E]``.
        """
        attended = self._attend(self.q_norm(q), self.kv_norm(kv), key_padding_mask, attention_mask)
        return self.skip_connection(q, attended)


class SelfAttention(_AttentionBlock, Module[[torch.Tensor, _Mask, _Mask], torch.Tensor]):
    """A sequence attends to itself, then a feedforward network (a pre-norm transformer layer).

    ``out = skip(x, attention(x_norm(x)))`` followed by the feedforward network, each
    joined by ``skip_kind``. Its arguments are :class:`CrossAttention`'s, ``embed_dim``
    being the sequence's features.

    Examples:
        >>> import torch
        >>> block = SelfAttention(8, num_heads=2, hidden_dim=16, skip_kind="residual")
        >>> padding = torch.tensor([[True, False, False]])
        >>> block(torch.randn(1, 3, 8), key_padding_mask=padding).shape
        torch.Size([1, 3, 8])
    """

    _norms = ("x_norm",)
    #: Norm of the sequence.
    x_norm: nn.LayerNorm

    def forward(self, x: torch.Tensor, key_padding_mask: _Mask = None, attention_mask: _Mask = None) -> torch.Tensor:
        """Attend ``x`` ``[B, X, E]`` to itself.

        Args:
            x: The sequence.
            key_padding_mask: ``[B, X]``, ``True`` at padding elements of ``x``.
            attention_mask: ``[X, X]``, ``True`` where an element may not attend to another.

        Returns:
            ``[B, X, E]``.
        """
        normed = self.x_norm(x)
        return self.skip_connection(x, self._attend(normed, normed, key_padding_mask, attention_mask))


class SelfAttentionStack(Module[[torch.Tensor, _Mask, _Mask], torch.Tensor]):
    """Self-attention repeated ``num_layers`` times, with the same masks at every layer.

    Args:
        module: The layer to repeat.
        num_layers: How many times.
        share_parameters: Every layer is ``module`` itself (one set of parameters),
            instead of an independent copy of it.

    Examples:
        >>> import torch
        >>> stack = SelfAttentionStack(SelfAttention(8, hidden_dim=16), 3, share_parameters=True)
        >>> stack.layers[0] is stack.layers[2], stack(torch.randn(2, 4, 8)).shape
        (True, torch.Size([2, 4, 8]))
    """

    #: The layers, applied in order.
    layers: nn.ModuleList

    def __init__(self, module: SelfAttention, num_layers: int, /, *, share_parameters: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [module if share_parameters else copy.deepcopy(module) for _ in range(num_layers)]
        )

    def forward(self, x: torch.Tensor, key_padding_mask: _Mask = None, attention_mask: _Mask = None) -> torch.Tensor:
        """Apply every layer to ``x`` ``[B, X, E]`` in turn; masks as :meth:`SelfAttention.forward`.

        Returns:
            ``[B, X, E]``.
        """
        for layer in self.layers:
            x = layer(x, key_padding_mask=key_padding_mask, attention_mask=attention_mask)
        return x
