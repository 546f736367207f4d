"""rl8's model interface, adapted to rl8lite's stateless protocol in this one place.

An rl8 model's ``forward(batch)`` returns a TensorDict of features and caches the
values, which ``value_function()`` returns; an rl8 recurrent model's
``forward(batch [B, T], states [B, 1])`` returns ``(features [B * T], states [B])`` with
its states as a TensorDict described by ``state_spec``. :func:`stateless` wraps such a
model so that the policy, the collect and the update call it as they call any rl8lite
model: ``(features, values)`` from one call, or ``(features, values, next_states)`` with
the states as one ``[B, state_size]`` tensor. rl8lite's own models pass through
unchanged.

Features become the flat tensor rl8lite's distributions take: an rl8 ``"logits"`` entry
(``[B, ..., n]``) as ``[B, n]``, rl8's ``"mean"`` and ``"log_std"`` as ``mean ‖ log_std``
(the layout of :class:`~rl8lite.distributions.Normal` and ``SquashedNormal``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from ..data import DataKeys
from ..specs import Composite
from .recurrent import RecurrentModel

__all__ = ["Rl8Model", "Rl8RecurrentModel", "flat_features", "is_rl8_style", "stateless"]


def is_rl8_style(model: nn.Module) -> bool:
    """Whether ``model`` follows rl8's interface: it has a ``value_function()`` method."""
    return callable(getattr(model, "value_function", None))


def flat_features(features: TensorDict | torch.Tensor, *, model_name: str = "the model") -> torch.Tensor:
    """rl8's feature TensorDict as the ``[B, num_inputs]`` tensor rl8lite's distributions take.

    Raises:
        TypeError: The features hold neither ``"logits"`` nor ``"mean"`` and ``"log_std"``.

    Examples:
        >>> import torch
        >>> flat_features(TensorDict({"logits": torch.zeros(4, 1, 3)}, batch_size=[4])).shape
        torch.Size([4, 3])
        >>> td = TensorDict({"mean": torch.zeros(4, 2), "log_std": torch.ones(4, 2)}, batch_size=[4])
        >>> flat_features(td)[0]
        tensor([0., 0., 1., 1.])
    """
    if isinstance(features, torch.Tensor):
        return features
    rows = features.batch_size[0]
    keys = set(features.keys())
    if "logits" in keys:
        return features["logits"].reshape(rows, -1)
    if {"mean", "log_std"} <= keys:
        return torch.cat([features["mean"].reshape(rows, -1), features["log_std"].reshape(rows, -1)], dim=-1)
    raise TypeError(
        f"{model_name} returned features {sorted(map(str, keys))}: rl8lite's distributions take rl8's"
        " 'logits' (Categorical) or 'mean' and 'log_std' (Normal, SquashedNormal)"
    )


class Rl8Model:
    """An rl8-style feedforward model called with rl8lite's protocol: ``(features, values)``.

    Holds a reference to the model (it is no module of its own: the policy registers the
    model once). The model's ``value_function()`` is read right after its ``forward``,
    inside one call, so nothing depends on which forward came last.

    Args:
        model: A model with rl8's ``forward(batch) -> TensorDict`` and ``value_function()``.
    """

    separable = False

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.name = type(model).__name__

    def features_and_values(self, obs: torch.Tensor | TensorDict) -> tuple[TensorDict, torch.Tensor]:
        """rl8's own outputs: the model's feature TensorDict and its values ``[B, 1]``."""
        batch = TensorDict({DataKeys.OBS: obs}, batch_size=[obs.shape[0]], device=obs.device)
        features = self.model(batch)
        return features, self.model.value_function().reshape(-1, 1)

    def __call__(self, obs: torch.Tensor | TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        features, values = self.features_and_values(obs)
        return flat_features(features, model_name=self.name), values

    def forward_features(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        return self(obs)[0]

    def forward_values(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        return self(obs)[1]


class Rl8RecurrentModel:
    """An rl8-style recurrent model called with rl8lite's protocol, one time step per call:
    ``(obs [B], states [B, state_size]) -> (features, values, next_states)``.

    The flat state is the model's ``state_spec`` leaves (e.g. ``hidden_states`` and
    ``cell_states``, each ``[num_layers, hidden_size]``) flattened and concatenated in the
    spec's key order; :meth:`states_td` and :meth:`flat_states` convert between the two.

    Args:
        model: A model with rl8's ``forward(batch, states)``, ``value_function()`` and
            ``state_spec`` (a :class:`~rl8lite.specs.Composite`).
    """

    def __init__(self, model: nn.Module) -> None:
        spec = getattr(model, "state_spec", None)
        if not isinstance(spec, Composite):
            raise TypeError(
                f"{type(model).__name__} follows rl8's recurrent interface (value_function) but has no"
                f" state_spec Composite describing its states (received {spec!r})"
            )
        self.model = model
        self.name = type(model).__name__
        self.leaves = [(key, tuple(leaf.shape)) for key, leaf in _leaves(spec)]
        self.state_size = sum(math.prod(shape) for _, shape in self.leaves)

    def init_states(self, batch_size: int, device: torch.device | str | None = None) -> torch.Tensor:
        """The model's initial states (``init_states(n)`` if it defines one, else zeros), flat."""
        own = getattr(type(self.model), "init_states", None)
        if own is not None and own is not RecurrentModel.init_states:  # rl8's init_states(n)
            states = self.flat_states(self.model.init_states(batch_size))
        else:
            states = torch.zeros(batch_size, self.state_size)
        return states.to(device) if device is not None else states

    def flat_states(self, states: TensorDict) -> torch.Tensor:
        """``[B, state_size]`` from rl8's state TensorDict (``[B]`` or ``[B, 1]``)."""
        rows = states.batch_size[0]
        return torch.cat([states.get(key).reshape(rows, -1) for key, _ in self.leaves], dim=-1)

    def states_td(self, states: torch.Tensor, *, time_dim: bool = False) -> TensorDict:
        """rl8's state TensorDict (``[B]``, or ``[B, 1]`` with ``time_dim``) from ``[B, state_size]``."""
        rows = states.shape[0]
        td = TensorDict({}, batch_size=[rows, 1] if time_dim else [rows], device=states.device)
        parts = states.split([math.prod(shape) for _, shape in self.leaves], dim=-1)
        for (key, shape), part in zip(self.leaves, parts):
            td.set(key, part.reshape(rows, *([1] if time_dim else []), *shape))
        return td

    def __call__(
        self, obs: torch.Tensor | TensorDict, states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rows = obs.shape[0]
        batch = TensorDict({DataKeys.OBS: obs.unsqueeze(1)}, batch_size=[rows, 1], device=obs.device)
        features, next_states = self.model(batch, self.states_td(states, time_dim=True))
        values = self.model.value_function().reshape(-1, 1)
        return flat_features(features, model_name=self.name), values, self.flat_states(next_states)


def _leaves(spec: Composite, prefix: tuple[str, ...] = ()) -> list[tuple[Any, Any]]:
    out = []
    for key in spec:
        leaf = spec[key]
        if isinstance(leaf, Composite):
            out.extend(_leaves(leaf, (*prefix, key)))
        else:
            path = (*prefix, key)
            out.append((path[0] if len(path) == 1 else path, leaf))
    return out


def stateless(model: nn.Module) -> Any:
    """``model`` in rl8lite's stateless protocol: itself, or an rl8-style model wrapped.

    The one place the two interfaces meet: a model with rl8's ``value_function()`` is
    wrapped in :class:`Rl8Model` (or :class:`Rl8RecurrentModel` when it is a
    :class:`~rl8lite.models.RecurrentModel` or has a ``state_spec``); any other model is
    returned as it is.
    """
    if not is_rl8_style(model):
        return model
    if isinstance(model, RecurrentModel) or getattr(model, "state_spec", None) is not None:
        return Rl8RecurrentModel(model)
    return Rl8Model(model)
