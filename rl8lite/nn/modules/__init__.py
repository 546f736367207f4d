"""The layers rl8 models are built from (rl8's ``rl8.nn.modules``): the typed
:class:`Module` base and plain layers in :mod:`.layers`, attention in :mod:`.attention`."""

from . import attention, layers
from .attention import *
from .layers import *

__all__ = attention.__all__ + layers.__all__
