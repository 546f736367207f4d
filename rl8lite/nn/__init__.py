"""Building blocks for models (rl8's ``rl8.nn``): :mod:`~rl8lite.nn.modules` and
:mod:`~rl8lite.nn.functional`."""

from . import functional, modules
from .functional import *
from .modules import *

__all__ = functional.__all__ + modules.__all__
