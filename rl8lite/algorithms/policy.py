"""A policy: a model plus the action distribution built from its features."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from ..data import DataKeys
from ..distributions import Distribution, Normal, default_distribution_cls
from ..models import Model, RecurrentModel
from ..specs import Spec


class Policy(nn.Module):
    """Samples actions and evaluates them with one model forward each.

    Args:
        model: Maps observations to ``(features, values)``.
        distribution_cls: Builds the action distribution from ``features``.
        action_spec: The env's action spec, handed to the distribution.
    """

    def __init__(
        self, model: Model, distribution_cls: type[Distribution], action_spec: Spec
    ) -> None:
        super().__init__()
        self.model = model
        self.distribution_cls = distribution_cls
        self.action_spec = action_spec

    def distribution(
        self, features: torch.Tensor, obs: torch.Tensor | TensorDict
    ) -> Distribution:
        """The action distribution for ``features`` (masked if ``obs`` has an action mask)."""
        mask = obs.get(DataKeys.ACTION_MASK, None) if isinstance(obs, TensorDict) else None
        return self.distribution_cls(features, self.action_spec, action_mask=mask)

    def act(
        self, obs: torch.Tensor | TensorDict, *, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(actions, logp, values)`` for a batch of observations."""
        features, values = self.model(obs)
        return (*self._draw(self.distribution(features, obs), deterministic), values)

    def sample(
        self, obs: torch.Tensor | TensorDict, *, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actions, logp)`` of a feedforward model, from its features alone
        (``forward_features``) when it is :attr:`separable`."""
        features = self.model.forward_features(obs) if self.separable else self.model(obs)[0]
        return self._draw(self.distribution(features, obs), deterministic)

    def _draw(self, dist: Distribution, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        if deterministic:
            actions = dist.deterministic_sample()
            logp = dist.logp(actions)
        else:
            actions, logp = dist.sample_with_logp()
        return as_spec_dtype(actions, self.action_spec), logp

    def evaluate(
        self, obs: torch.Tensor | TensorDict, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logp, entropy, values)`` of given actions, for the PPO update."""
        features, values = self.model(obs)
        dist = self.distribution(features, obs)
        return dist.logp(actions), dist.entropy(), values

    def values(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        """Value estimates ``[B, 1]``."""
        return self.model.forward_values(obs) if self.separable else self.model(obs)[1]

    @property
    def separable(self) -> bool:
        """Whether the model computes features and values separately (``Model.separable``;
        a plain ``nn.Module`` following the model protocol is not), and nothing hooks or
        replaces its ``forward`` (hooks run only through ``forward``)."""
        model = self.model
        return (
            getattr(model, "separable", False) is True
            and not model._forward_hooks
            and not model._forward_pre_hooks
            and "forward" not in vars(model)
        )

    @property
    def recurrent(self) -> bool:
        """Whether the model carries a state from one time step to the next."""
        return isinstance(self.model, RecurrentModel)

    def act_recurrent(
        self, obs: torch.Tensor | TensorDict, states: torch.Tensor, *, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(actions, logp, values, next_states)`` for one time step of a recurrent model."""
        features, values, next_states = self.model(obs, states)
        return (*self._draw(self.distribution(features, obs), deterministic), values, next_states)

    def evaluate_sequences(
        self,
        obs: torch.Tensor | TensorDict,
        actions: torch.Tensor,
        states: torch.Tensor,
        resets: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unroll ``[B, L]`` sequences from their initial ``states``; ``(logp, entropy, values)``
        flattened to ``[B * L, 1]``. ``resets[:, j]`` zeroes the state before step ``j``
        (the copy's episode ended at step ``j - 1``)."""
        logps, entropies, values = [], [], []
        for j in range(actions.shape[1]):
            states = states * (~resets[:, j, None]).to(states.dtype)
            features, value, states = self.model(obs[:, j], states)
            dist = self.distribution(features, obs[:, j])
            logps.append(dist.logp(actions[:, j]))
            entropies.append(dist.entropy())
            values.append(value)
        return (
            torch.stack(logps, 1).reshape(-1, 1),
            torch.stack(entropies, 1).reshape(-1, 1),
            torch.stack(values, 1).reshape(-1, 1),
        )

    def forward(self, obs: Any) -> torch.Tensor:  # type: ignore[override]
        """The deterministic action."""
        return self.act(obs, deterministic=True)[0]


def build_policy(
    observation_spec: Spec, action_spec: Spec, config: Any, default_model_cls: type[Model]
) -> Policy:
    """The policy a config describes: ``model``, or ``model_cls(obs_spec, action_spec,
    **model_config)``, or ``default_model_cls`` sized for the distribution; the
    distribution is ``distribution_cls`` or the action spec's default."""
    distribution_cls = config.distribution_cls or default_distribution_cls(action_spec)
    model: Model
    if config.model is not None:
        model = config.model
    elif config.model_cls is not None:
        model = config.model_cls(observation_spec, action_spec, **(config.model_config or {}))
    else:
        model = default_model_cls(
            observation_spec,
            action_spec,
            num_features=distribution_cls.num_inputs(action_spec),
            gaussian=issubclass(distribution_cls, Normal),
            **(config.model_config or {}),
        )
    return Policy(model, distribution_cls, action_spec)


def as_spec_dtype(actions: torch.Tensor, action_spec: Any) -> torch.Tensor:
    """``actions`` in the action spec's dtype (distributions sample in their features'
    float dtype, or int64 indices), as the env and the buffer expect."""
    dtype = getattr(action_spec, "dtype", None)
    return actions if dtype is None or actions.dtype == dtype else actions.to(dtype)
