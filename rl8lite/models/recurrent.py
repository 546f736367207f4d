"""Recurrent models: one time step per call, the state carried by the caller."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDict
from torch import nn

from ..data import DataKeys
from ..specs import Composite, Spec, Unbounded
from .base import Model
from .default import flat_obs_size, flatten_obs, mlp


class RecurrentModel(Model):
    """A model whose forward takes and returns a recurrent state ``[B, state_size]``.

    ``forward(obs, states) -> (features, values, next_states)`` processes one
    time step; the algorithm carries the states through the rollout, zeroes them
    where an episode ends, and unrolls sequences for truncated BPTT.
    """

    state_size: int

    def init_states(self, batch_size: int, device: torch.device) -> torch.Tensor:
        """Initial (zero) states ``[batch_size, state_size]``."""
        return torch.zeros(batch_size, self.state_size, device=device)

    def forward(  # type: ignore[override]
        self, obs: torch.Tensor | TensorDict, states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class DefaultRecurrentModel(RecurrentModel):
    """Encoder MLP, an LSTM cell, then actor and critic heads; state = ``h ‖ c``.

    Args:
        observation_spec: The env's observation spec (vector or Composite of vectors).
        action_spec: The env's action spec.
        num_features: Features the action distribution needs.
        gaussian: Whether the features are ``mean ‖ log_std`` (adds a log-std parameter).
        hiddens: Encoder widths; the LSTM has the last width.
        activation: Encoder activation.
        init_log_std: Initial log-std for Gaussian distributions.
    """

    def __init__(
        self,
        observation_spec: Spec,
        action_spec: Spec,
        /,
        *,
        num_features: int,
        gaussian: bool = False,
        hiddens: Sequence[int] = (64,),
        activation: str = "tanh",
        init_log_std: float = 0.0,
    ) -> None:
        super().__init__(
            observation_spec, action_spec, num_features=num_features, gaussian=gaussian,
            hiddens=list(hiddens), activation=activation, init_log_std=init_log_std,
        )
        width = hiddens[-1]
        self.hidden_size = width
        self.state_size = 2 * width
        #: The parts of the flat state ``h ‖ c`` (rl8's names and shapes, one LSTM layer).
        self.state_spec = Composite({
            DataKeys.HIDDEN_STATES: Unbounded([1, width], device=action_spec.device),
            DataKeys.CELL_STATES: Unbounded([1, width], device=action_spec.device),
        })
        self.encoder = mlp(flat_obs_size(observation_spec), hiddens[:-1], width, activation, out_gain=1.0)
        self.lstm = nn.LSTMCell(width, width)
        actor_outputs = num_features // 2 if gaussian else num_features
        self.actor = mlp(width, (), actor_outputs, activation, out_gain=0.01)
        self.critic = mlp(width, (), 1, activation, out_gain=1.0)
        self.log_std = nn.Parameter(torch.full((actor_outputs,), float(init_log_std))) if gaussian else None

    def forward(  # type: ignore[override]
        self, obs: torch.Tensor | TensorDict, states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = torch.tanh(self.encoder(flatten_obs(obs, self.observation_spec)))
        h, c = self.lstm(x, states.split(self.hidden_size, dim=-1))
        features = self.actor(h)
        if self.log_std is not None:
            features = torch.cat([features, self.log_std.expand_as(features)], dim=-1)
        return features, self.critic(h), torch.cat([h, c], dim=-1)
