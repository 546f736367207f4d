"""Modules rl8 models are built from (rl8's ``rl8.nn.modules``)."""

from .activations import ACTIVATIONS, SquaredReLU, get_activation
from .attention import CrossAttention, SelfAttention, SelfAttentionStack
from .embeddings import PositionalEmbedding
from .mlp import MLP
from .module import Module
from .perceiver import PerceiverIOLayer, PerceiverLayer
from .pointer import PointerNetwork
from .skip import SequentialSkipConnection

__all__ = [
    "ACTIVATIONS", "MLP", "CrossAttention", "Module", "PerceiverIOLayer", "PerceiverLayer", "PointerNetwork",
    "PositionalEmbedding", "SelfAttention", "SelfAttentionStack", "SequentialSkipConnection", "SquaredReLU",
    "get_activation",
]
