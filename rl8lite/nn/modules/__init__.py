"""The layers rl8 models are built from (rl8's ``rl8.nn.modules``): the typed
:class:`Module` base and plain layers in :mod:`.layers`, attention in :mod:`.attention`."""

from .attention import (
    CrossAttention,
    PerceiverIOLayer,
    PerceiverLayer,
    PointerNetwork,
    SelfAttention,
    SelfAttentionStack,
)
from .layers import (
    ACTIVATIONS,
    MLP,
    Module,
    PositionalEmbedding,
    SequentialSkipConnection,
    SquaredReLU,
    get_activation,
)

__all__ = [
    "ACTIVATIONS", "MLP", "CrossAttention", "Module", "PerceiverIOLayer", "PerceiverLayer",
    "PointerNetwork", "PositionalEmbedding", "SelfAttention", "SelfAttentionStack",
    "SequentialSkipConnection", "SquaredReLU", "get_activation",
]
