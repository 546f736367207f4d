"""A policy: a model plus the action distribution built from its features.

:class:`Policy` is what the collect and the update call (one method per job);
:mod:`rl8lite.policies` is rl8's flag-driven facade over it.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from torch import nn

from ..data import DataKeys
from ..distributions import Distribution, Normal, default_distribution_cls
from ..models import Model, RecurrentModel
from ..models.rl8_style import stateless
from ..specs import Spec


class Policy(nn.Module):
    """Samples actions and evaluates them with one model forward each.

    Args:
        model: Maps observations to ``(features, values)`` (or follows rl8's interface:
            :func:`~rl8lite.models.rl8_style.stateless` adapts it, see :attr:`network`).
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
        network = stateless(model)
        # A plain attribute (not a submodule): the adapter holds the model registered above.
        self._adapter = None if network is model else network

    @property
    def network(self) -> Any:
        """The model in rl8lite's stateless protocol: :attr:`model` itself, or its rl8-style
        adapter (:mod:`rl8lite.models.rl8_style`)."""
        return self.model if self._adapter is None else self._adapter

    @property
    def device(self) -> torch.device:
        """The device of the policy's parameters (the CPU for a model without any)."""
        return next(self.parameters(), torch.empty(0)).device

    def distribution(
        self, features: torch.Tensor, obs: torch.Tensor | TensorDict
    ) -> Distribution:
        """The action distribution for ``features`` (masked if ``obs`` has an action mask;
        a windowed action mask's current step)."""
        mask = obs.get(DataKeys.ACTION_MASK, None) if isinstance(obs, TensorDict) else None
        if isinstance(mask, TensorDict):
            mask = mask[DataKeys.INPUTS][:, -1]
        return self.distribution_cls(features, self.action_spec, action_mask=mask)

    def act(
        self, obs: torch.Tensor | TensorDict, *, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(actions, logp, values)`` for a batch of observations."""
        features, values = self.network(obs)
        return (*self._draw(self.distribution(features, obs), deterministic), values)

    def sample_actions(
        self, obs: torch.Tensor | TensorDict, *, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actions, logp)`` of a feedforward model, from its features alone
        (``forward_features``) when it is :attr:`separable`."""
        network = self.network
        features = network.forward_features(obs) if self.separable else network(obs)[0]
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
        features, values = self.network(obs)
        dist = self.distribution(features, obs)
        return dist.logp(actions), dist.entropy(), values

    def values(self, obs: torch.Tensor | TensorDict) -> torch.Tensor:
        """Value estimates ``[B, 1]``."""
        network = self.network
        return network.forward_values(obs) if self.separable else network(obs)[1]

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

    def init_states(self, n: int, /) -> torch.Tensor:
        """A recurrent model's initial states for ``n`` copies: ``[n, state_size]`` on the
        policy's device (rl8's name; rl8's are a TensorDict, rl8lite's one tensor)."""
        return self.network.init_states(n, self.device)

    def act_recurrent(
        self, obs: torch.Tensor | TensorDict, states: torch.Tensor, *, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(actions, logp, values, next_states)`` for one time step of a recurrent model."""
        features, values, next_states = self.network(obs, states)
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
            features, value, states = self.network(obs[:, j], states)
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


def build_model(
    observation_spec: Spec, action_spec: Spec, config: Any, default_model_cls: type[Model]
) -> tuple[nn.Module, type[Distribution]]:
    """The model and distribution class a config describes: ``model``, or
    ``model_cls(obs_spec, action_spec, **model_config)``, or ``default_model_cls`` sized for
    the distribution; the distribution is ``distribution_cls`` or the action spec's default."""
    distribution_cls = config.distribution_cls or default_distribution_cls(action_spec)
    model: nn.Module
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
    return model, distribution_cls


def as_spec_dtype(actions: torch.Tensor, action_spec: Any) -> torch.Tensor:
    """``actions`` in the action spec's dtype (distributions sample in their features'
    float dtype, or int64 indices), as the env and the buffer expect."""
    dtype = getattr(action_spec, "dtype", None)
    return actions if dtype is None or actions.dtype == dtype else actions.to(dtype)
