"""Recurrent models: one time step per call, the state carried by the caller."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from ..data import DataKeys
from ..specs import Composite, Spec, Unbounded
from .base import Model
from .default import actor_head, flat_obs_size, flatten_obs, mlp, with_log_std


class RecurrentModel(Model):
    """A model of one time step, ``forward(obs, states) -> (features, values, next_states)``
    with states ``[B, state_size]``; the algorithm carries them through the rollout, zeroes
    them where an episode ends, and unrolls sequences for truncated BPTT."""

    state_size: int

    def init_states(self, batch_size: int, device: torch.device) -> Tensor:
        """Initial (zero) states ``[batch_size, state_size]``."""
        return torch.zeros(batch_size, self.state_size, device=device)

    def forward(  # type: ignore[override]
        self, obs: Tensor | TensorDict, states: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        raise NotImplementedError


class DefaultRecurrentModel(RecurrentModel):
    """Encoder MLP of ``hiddens``, an LSTM cell of the last width, then actor and critic heads;
    state = ``h ‖ c``. Arguments as :class:`~rl8lite.models.DefaultModel`'s."""

    def __init__(self, observation_spec: Spec, action_spec: Spec, /, *, num_features: int,
                 gaussian: bool = False, hiddens: Sequence[int] = (64,),
                 activation: str = "tanh", init_log_std: float = 0.0) -> None:
        super().__init__(observation_spec, action_spec, num_features=num_features,
                         gaussian=gaussian, hiddens=list(hiddens), activation=activation,
                         init_log_std=init_log_std)
        width = self.hidden_size = hiddens[-1]
        self.state_size = 2 * width
        #: The parts of the flat state ``h ‖ c`` (rl8's names and shapes, one LSTM layer).
        self.state_spec = Composite({
            DataKeys.HIDDEN_STATES: Unbounded([1, width], device=action_spec.device),
            DataKeys.CELL_STATES: Unbounded([1, width], device=action_spec.device),
        })
        in_features = flat_obs_size(observation_spec)
        self.encoder = mlp(in_features, hiddens[:-1], width, activation, out_gain=1.0)
        self.lstm = nn.LSTMCell(width, width)
        self.actor, log_std = actor_head(width, (), num_features, gaussian, activation,
                                         init_log_std)
        self.critic = mlp(width, (), 1, activation, out_gain=1.0)
        self.log_std = log_std  # after the critic: the parameters' order

    def forward(  # type: ignore[override]
        self, obs: Tensor | TensorDict, states: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        x = torch.tanh(self.encoder(flatten_obs(obs, self.observation_spec)))
        h, c = self.lstm(x, states.split(self.hidden_size, dim=-1))
        return with_log_std(self.actor(h), self.log_std), self.critic(h), torch.cat([h, c], dim=-1)
