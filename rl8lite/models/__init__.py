"""Policy models: a model maps observations to distribution features and values."""

from ._base import Model, ModelFactory
from .lstm import DefaultRecurrentModel, RecurrentModel
from .mlp import DefaultModel, flat_obs_size, flatten_obs

__all__ = ["DefaultModel", "DefaultRecurrentModel", "Model", "RecurrentModel", "ModelFactory", "flat_obs_size", "flatten_obs"]
