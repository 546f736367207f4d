"""A policy: a model plus the action distribution built from its features."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from .data import DataKeys
from .distributions import Distribution
from .models import Model
from .specs import Spec


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
        dist = self.distribution(features, obs)
        if deterministic:
            actions = dist.deterministic_sample()
            return actions, dist.logp(actions), values
        actions, logp = dist.sample_with_logp()
        return actions, logp, values

    def evaluate(
        self, obs: torch.Tensor | TensorDict, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logp, entropy, values)`` of given actions, for the PPO update."""
        features, values = self.model(obs)
        dist = self.distribution(features, obs)
        return dist.logp(actions), dist.entropy(), values

    def values(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        """Value estimates ``[B, 1]``."""
        return self.model(obs)[1]

    def forward(self, obs: Any) -> torch.Tensor:  # type: ignore[override]
        """The deterministic action (what an exported policy serves)."""
        return self.act(obs, deterministic=True)[0]
