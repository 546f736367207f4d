"""Building blocks for models (rl8's ``rl8.nn``): layers, and functions of masks and PPO's math."""

from . import functional, modules
from .functional import *
from .modules import *

__all__ = functional.__all__ + modules.__all__
