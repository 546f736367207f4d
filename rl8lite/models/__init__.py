"""Policy models: a model maps observations to distribution features and values."""

import sys

from . import default
from .base import Model, ModelFactory, RecurrentModel
from .cnn import NatureCNNModel
from .default import DefaultModel, DefaultRecurrentModel, flat_obs_size, flatten_obs

# pickled recurrent models (rl8's Policy.save) name the module they were defined in before
sys.modules.setdefault(f"{__name__}.recurrent", default)

__all__ = [
    "DefaultModel", "DefaultRecurrentModel", "Model", "ModelFactory", "NatureCNNModel",
    "RecurrentModel", "flat_obs_size", "flatten_obs",
]
