"""Policy models: a model maps observations to distribution features and values."""

from .base import Model, ModelFactory, RecurrentModel
from .default import DefaultModel, DefaultRecurrentModel, flat_obs_size, flatten_obs

__all__ = [
    "DefaultModel", "DefaultRecurrentModel", "Model", "ModelFactory", "RecurrentModel",
    "flat_obs_size", "flatten_obs",
]
