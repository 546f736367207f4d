"""Building blocks for models (rl8's ``rl8.nn``): everything in :mod:`~rl8lite.nn.modules`
and :mod:`~rl8lite.nn.functional`.

Examples:
    >>> import torch
    >>> from rl8lite.nn import SelfAttention, SelfAttentionStack, masked_avg
    >>> from rl8lite.views import pad_last_sequence
    >>> window = pad_last_sequence(torch.randn(4, 2, 8), 5)  # 2 steps so far, 3 of padding
    >>> stack = SelfAttentionStack(SelfAttention(8, hidden_dim=16, skip_kind="residual"), 2)
    >>> x = stack(window["inputs"], key_padding_mask=window["padding_mask"])
    >>> masked_avg(x, mask=~window["padding_mask"], dim=1).shape
    torch.Size([4, 8])
"""

from . import functional, modules
from .functional import *
from .modules import *

__all__ = functional.__all__ + modules.__all__
