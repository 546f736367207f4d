"""rl8's model interface (``forward(batch)`` returning a feature TensorDict, then
``value_function()``; recurrent: ``forward(batch, states)``, states described by
``state_spec``), adapted to rl8lite's stateless protocol."""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from ..data import DataKeys
from ..specs import Composite, spec_leaves
from .base import Model, RecurrentModel

__all__ = ["Rl8Model", "Rl8RecurrentModel", "flat_features", "stateless"]


def flat_features(features: TensorDict | Tensor, *, model_name: str = "the model") -> Tensor:
    """rl8's feature TensorDict as the ``[B, num_inputs]`` tensor rl8lite's distributions take:
    ``"logits"`` ``[B, ..., n]`` as ``[B, n]``, ``"mean"`` and ``"log_std"`` as
    ``mean ‖ log_std``; a ``TypeError`` for other features.

    Examples:
        >>> flat_features(TensorDict({"logits": torch.zeros(4, 1, 3)}, batch_size=[4])).shape
        torch.Size([4, 3])
        >>> td = TensorDict({"mean": torch.zeros(4, 2), "log_std": torch.ones(4, 2)}, [4])
        >>> flat_features(td)[0]
        tensor([0., 0., 1., 1.])
    """
    if isinstance(features, Tensor):
        return features
    rows, keys = features.batch_size[0], set(features.keys())
    if "logits" in keys:
        return features["logits"].reshape(rows, -1)
    if {"mean", "log_std"} <= keys:
        parts = [features["mean"].reshape(rows, -1), features["log_std"].reshape(rows, -1)]
        return torch.cat(parts, dim=-1)
    raise TypeError(
        f"{model_name} returned features {sorted(map(str, keys))}: rl8lite's distributions take"
        " rl8's 'logits' (Categorical) or 'mean' and 'log_std' (Normal, SquashedNormal)"
    )


class Rl8Model:
    """An rl8-style feedforward model called with rl8lite's protocol: ``(features, values)``,
    ``value_function()`` read right after ``forward`` in one call. No module itself: the
    policy registers the model."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.name = type(model).__name__

    def features_and_values(self, obs: Tensor | TensorDict) -> tuple[TensorDict, Tensor]:
        """rl8's own outputs: the model's feature TensorDict and its values ``[B, 1]``."""
        batch = TensorDict({DataKeys.OBS: obs}, batch_size=[obs.shape[0]], device=obs.device)
        features = self.model(batch)
        return features, self.model.value_function().reshape(-1, 1)

    def __call__(self, obs: Tensor | TensorDict) -> tuple[Tensor, Tensor]:
        features, values = self.features_and_values(obs)
        return flat_features(features, model_name=self.name), values

    forward_features = Model.forward_features  # self(obs)[0]
    forward_values = Model.forward_values  # self(obs)[1]


class Rl8RecurrentModel:
    """An rl8-style recurrent model called with rl8lite's protocol, one time step per call:
    ``(obs [B], states [B, state_size]) -> (features, values, next_states)``, the flat state
    being the ``state_spec`` leaves flattened and concatenated in the spec's key order."""

    def __init__(self, model: nn.Module) -> None:
        spec = getattr(model, "state_spec", None)
        if not isinstance(spec, Composite):
            raise TypeError(f"{type(model).__name__} follows rl8's recurrent interface"
                            " (value_function) but has no state_spec Composite describing its"
                            f" states (received {spec!r})")
        self.model = model
        self.name = type(model).__name__
        self.leaves = [(path[0] if len(path) == 1 else path, tuple(leaf.shape))
                       for path, leaf in spec_leaves(spec)]
        self.state_size = sum(math.prod(shape) for _, shape in self.leaves)

    def init_states(self, batch_size: int, device: torch.device | str | None = None) -> Tensor:
        """The model's initial states (its ``init_states(n)``, else zeros), flat."""
        own = getattr(type(self.model), "init_states", None)
        if own is not None and own is not RecurrentModel.init_states:  # rl8's init_states(n)
            states = self.flat_states(self.model.init_states(batch_size))
        else:
            states = torch.zeros(batch_size, self.state_size)
        return states.to(device) if device is not None else states

    def flat_states(self, states: TensorDict) -> Tensor:
        """``[B, state_size]`` from rl8's state TensorDict (``[B]`` or ``[B, 1]``)."""
        rows = states.batch_size[0]
        return torch.cat([states.get(key).reshape(rows, -1) for key, _ in self.leaves], dim=-1)

    def states_td(self, states: Tensor, *, time_dim: bool = False) -> TensorDict:
        """rl8's state TensorDict (``[B]``, or ``[B, 1]`` with ``time_dim``) from flat states."""
        rows = states.shape[0]
        td = TensorDict({}, batch_size=[rows, 1] if time_dim else [rows], device=states.device)
        parts = states.split([math.prod(shape) for _, shape in self.leaves], dim=-1)
        for (key, shape), part in zip(self.leaves, parts):
            td.set(key, part.reshape(rows, *([1] if time_dim else []), *shape))
        return td

    def __call__(self, obs: Tensor | TensorDict, states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        rows = obs.shape[0]
        batch = TensorDict({DataKeys.OBS: obs.unsqueeze(1)}, [rows, 1], device=obs.device)
        features, next_states = self.model(batch, self.states_td(states, time_dim=True))
        values = self.model.value_function().reshape(-1, 1)
        return flat_features(features, model_name=self.name), values, self.flat_states(next_states)


def stateless(model: nn.Module) -> Any:
    """``model`` in rl8lite's stateless protocol: a model with rl8's ``value_function()``
    wrapped in :class:`Rl8Model` (:class:`Rl8RecurrentModel` when it is a ``RecurrentModel``
    or has a ``state_spec``); any other model as it is."""
    if not callable(getattr(model, "value_function", None)):
        return model
    if isinstance(model, RecurrentModel) or getattr(model, "state_spec", None) is not None:
        return Rl8RecurrentModel(model)
    return Rl8Model(model)
