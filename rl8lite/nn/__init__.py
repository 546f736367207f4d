"""Building blocks for models (rl8's ``rl8.nn``): layers in :mod:`~rl8lite.nn.modules`,
masked pooling and sampling in :mod:`~rl8lite.nn.functional`.

Examples:
    A transformer over a view's window of past prices, pooled over its valid steps:

    >>> import torch
    >>> from rl8lite.nn import SelfAttention, SelfAttentionStack, masked_avg
    >>> from rl8lite.views import pad_last_sequence
    >>> window = pad_last_sequence(torch.randn(4, 2, 8), 5)  # 2 steps so far, 3 of padding
    >>> stack = SelfAttentionStack(SelfAttention(8, hidden_dim=16, skip_kind="residual"), 2)
    >>> x = stack(window["inputs"], key_padding_mask=window["padding_mask"])
    >>> masked_avg(x, mask=~window["padding_mask"], dim=1).shape
    torch.Size([4, 8])
"""

from .functional import (
    binary_mask_to_float_mask,
    float_mask_to_binary_mask,
    mask_from_lengths,
    masked_avg,
    masked_categorical_sample,
    masked_log_softmax,
    masked_max,
    skip_connection,
)
from .modules import (
    MLP,
    CrossAttention,
    Module,
    PerceiverIOLayer,
    PerceiverLayer,
    PointerNetwork,
    PositionalEmbedding,
    SelfAttention,
    SelfAttentionStack,
    SequentialSkipConnection,
    SquaredReLU,
    get_activation,
)
from .ppo import generalized_advantage_estimate, ppo_losses

__all__ = [
    "MLP", "CrossAttention", "Module", "PerceiverIOLayer", "PerceiverLayer", "PointerNetwork",
    "PositionalEmbedding", "SelfAttention", "SelfAttentionStack", "SequentialSkipConnection",
    "SquaredReLU", "binary_mask_to_float_mask", "float_mask_to_binary_mask",
    "generalized_advantage_estimate", "get_activation", "mask_from_lengths", "masked_avg",
    "masked_categorical_sample", "masked_log_softmax", "masked_max", "ppo_losses",
    "skip_connection",
]
