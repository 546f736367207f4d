"""Policy models: a model maps observations to distribution features and values."""

from .base import Model, ModelFactory
from .default import DefaultModel, flat_obs_size, flatten_obs
from .recurrent import DefaultRecurrentModel, RecurrentModel

__all__ = [
    "DefaultModel", "DefaultRecurrentModel", "Model", "ModelFactory", "RecurrentModel",
    "flat_obs_size", "flatten_obs",
]
