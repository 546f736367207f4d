"""The model protocol: ``forward(obs) -> (features, values)`` in one pass."""

from __future__ import annotations

from typing import Any, Protocol

import torch
from tensordict import TensorDict
from torch import nn

from ..specs import Spec


class Model(nn.Module):
    """Base class of policy models.

    A model returns, in one forward pass, the features its action distribution
    is built from (``[B, num_inputs]``) and the value estimates (``[B, 1]``).
    Unlike rl8's models it keeps no state between calls: there is no separate
    ``value_function()`` reading a cached forward pass.

    Args:
        observation_spec: The env's observation spec.
        action_spec: The env's action spec.
        **config: Model-specific options, kept in :attr:`config`.
    """

    def __init__(self, observation_spec: Spec, action_spec: Spec, /, **config: Any) -> None:
        super().__init__()
        self.observation_spec = observation_spec
        self.action_spec = action_spec
        self.config = config

    def forward(  # type: ignore[override]
        self, obs: torch.Tensor | TensorDict
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    #: Whether :meth:`forward_features` and :meth:`forward_values` each compute one of
    #: ``forward``'s outputs without the other (no shared layers). The collect then samples
    #: actions from the features alone and computes the values of all its observations in
    #: one batched pass after the rollout, instead of ``horizon`` small ones. A model with
    #: separate actor and critic networks sets it and overrides both methods. Ignored
    #: while the model has forward hooks (they would not run during the collect).
    separable: bool = False

    def forward_features(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        """The features alone (``forward(obs)[0]`` unless a separable model overrides it)."""
        return self(obs)[0]

    def forward_values(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        """The values alone (``forward(obs)[1]`` unless a separable model overrides it)."""
        return self(obs)[1]


class ModelFactory(Protocol):
    """Anything that builds a :class:`Model` from the env's specs and a config."""

    def __call__(
        self, observation_spec: Spec, action_spec: Spec, /, **config: Any
    ) -> Model: ...
