"""Perceiver layers: embed variable-length sequences into a fixed-size latent array."""

from __future__ import annotations

import torch
from torch import nn

from .attention import CrossAttention, SelfAttention, SelfAttentionStack
from .module import Module

_Mask = torch.Tensor | None


class PerceiverLayer(Module[[torch.Tensor, torch.Tensor, _Mask, _Mask], torch.Tensor]):
    """A latent array cross-attends to an input sequence, then self-attends
    (`Perceiver <https://arxiv.org/abs/2103.03206>`_, Jaegle et al. 2021).

    The latent array's length is independent of the input's, so sequences of any
    length (embedded to ``embed_dim`` features first) become ``[B, Q, E]``.

    Args:
        embed_dim: Features ``E`` of the latent array and of the input sequence.
        num_heads: Attention heads in every block.
        hidden_dim: Hidden features of every block's feedforward network.
        num_layers: Self-attention layers after the cross-attention.
        activation_fn: Activation name (:func:`~rl8lite.nn.get_activation`).
        attention_dropout: Dropout on the attention weights.
        hidden_dropout: Dropout inside the feedforward networks.
        skip_kind: ``"cat"``, ``"residual"`` or ``None`` (:class:`SequentialSkipConnection`).
        share_parameters: The self-attention layers share one set of parameters.

    Examples:
        >>> import torch
        >>> layer = PerceiverLayer(8, hidden_dim=16)
        >>> latent, inputs = torch.randn(2, 4, 8), torch.randn(2, 10, 8)
        >>> layer(latent, inputs).shape
        torch.Size([2, 4, 8])
    """

    #: The latent array (queries) attending to the inputs.
    cross_attention: CrossAttention
    #: The latent array attending to itself.
    self_attention: SelfAttentionStack

    def __init__(
        self,
        embed_dim: int,
        /,
        *,
        num_heads: int = 2,
        hidden_dim: int = 128,
        num_layers: int = 2,
        activation_fn: str = "relu",
        attention_dropout: float = 0.0,
        hidden_dropout: float = 0.0,
        skip_kind: str = "cat",
        share_parameters: bool = False,
    ) -> None:
        super().__init__()
        block = {"num_heads": num_heads, "hidden_dim": hidden_dim, "activation_fn": activation_fn,
                 "attention_dropout": attention_dropout, "hidden_dropout": hidden_dropout, "skip_kind": skip_kind}
        self.cross_attention = CrossAttention(embed_dim, **block)
        self.self_attention = SelfAttentionStack(SelfAttention(embed_dim, **block), num_layers,
                                                 share_parameters=share_parameters)

    def forward(
        self, q: torch.Tensor, kv: torch.Tensor, key_padding_mask: _Mask = None, attention_mask: _Mask = None
    ) -> torch.Tensor:
        """The latent array ``q`` ``[B, Q, E]`` after attending to ``kv`` ``[B, K, E]``.

        Args:
            q: Latent array (e.g. a learned one, or a previous layer's output).
            kv: Input sequence.
            key_padding_mask: ``[B, K]``, ``True`` at padding elements of ``kv``.
            attention_mask: ``[Q, K]``, ``True`` where a latent may not attend to an input.

        Returns:
            ``[B, Q, E]``.
        """
        return self.self_attention(self.cross_attention(q, kv, key_padding_mask, attention_mask))


class PerceiverIOLayer(Module[[torch.Tensor, torch.Tensor, _Mask, _Mask], torch.Tensor]):
    """A :class:`PerceiverLayer` whose latent array is then read out by a learned output
    query of ``output_seq_dim`` elements (`Perceiver IO <https://arxiv.org/abs/2107.14795>`_,
    Jaegle et al. 2021): inputs of any length in, ``[B, output_seq_dim, E]`` out.

    Its other arguments are :class:`PerceiverLayer`'s; they shape the read-out's
    cross-attention too.

    Args:
        embed_dim: Features ``E`` of the latent array, the inputs and the output.
        output_seq_dim: Elements ``O`` of the output sequence.

    Examples:
        >>> import torch
        >>> layer = PerceiverIOLayer(8, 3, hidden_dim=16)
        >>> layer(torch.randn(2, 4, 8), torch.randn(2, 10, 8)).shape
        torch.Size([2, 3, 8])
    """

    #: Latent array attending to the inputs.
    perceiver_layer: PerceiverLayer
    #: Learned output query, ``[output_seq_dim, embed_dim]`` (Xavier-uniform initialised).
    output_query: nn.Parameter
    #: The output query attending to the latent array.
    decoder: CrossAttention

    def __init__(
        self,
        embed_dim: int,
        output_seq_dim: int,
        /,
        *,
        num_heads: int = 2,
        hidden_dim: int = 128,
        num_layers: int = 2,
        activation_fn: str = "relu",
        attention_dropout: float = 0.0,
        hidden_dropout: float = 0.0,
        skip_kind: str = "cat",
        share_parameters: bool = False,
    ) -> None:
        super().__init__()
        block = {"num_heads": num_heads, "hidden_dim": hidden_dim, "activation_fn": activation_fn,
                 "attention_dropout": attention_dropout, "hidden_dropout": hidden_dropout, "skip_kind": skip_kind}
        self.perceiver_layer = PerceiverLayer(embed_dim, num_layers=num_layers, share_parameters=share_parameters,
                                              **block)
        self.output_query = nn.Parameter(nn.init.xavier_uniform_(torch.empty(output_seq_dim, embed_dim)))
        self.decoder = CrossAttention(embed_dim, **block)

    def forward(
        self, q: torch.Tensor, kv: torch.Tensor, key_padding_mask: _Mask = None, attention_mask: _Mask = None
    ) -> torch.Tensor:
        """Attend the latent array ``q`` ``[B, Q, E]`` to ``kv`` ``[B, K, E]``, then read it out.

        Args:
            q: Latent array.
            kv: Input sequence.
            key_padding_mask: ``[B, K]``, ``True`` at padding elements of ``kv``.
            attention_mask: ``[Q, K]``, ``True`` where a latent may not attend to an input.

        Returns:
            ``[B, O, E]``, ``O = output_seq_dim``.
        """
        latent = self.perceiver_layer(q, kv, key_padding_mask, attention_mask)
        return self.decoder(self.output_query.expand(q.shape[0], -1, -1), latent)
