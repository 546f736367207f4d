"""Names shared by every module: buffer keys and the device alias (rl8's names)."""

from __future__ import annotations

import torch

Device = str | torch.device


class DataKeys:
    """Keys of the entries in :attr:`Algorithm.buffer` and in env outputs."""

    OBS = "obs"  #: Observations from the environment.
    REWARDS = "rewards"  #: Rewards from the environment, shape ``[N, 1]``.
    TERMINATED = "terminated"  #: The episode ended in a terminal state: no bootstrapping.
    TRUNCATED = "truncated"  #: The episode was cut short: bootstrapped from its last state.
    FINAL_OBS = "final_obs"  #: Last observation before an env's own reset of a finished copy.
    ACTIONS = "actions"  #: Actions sampled by the policy.
    LOGP = "logp"  #: Log-probability of ``actions`` under the policy that sampled them.
    VALUES = "values"  #: Value estimates of the observations.
    FINAL_VALUES = "final_values"  #: Values of ``final_obs`` (or stand-ins) of truncated copies.
    ADVANTAGES = "advantages"  #: Generalized advantage estimates.
    RETURNS = "returns"  #: Value-function targets (advantages + values).
    #: Running discounted return used to scale rewards (reward normalisation).
    REVERSED_DISCOUNTED_RETURNS = "reversed_discounted_returns"
    ACTION_MASK = "action_mask"  #: Mask of valid actions inside a composite observation.
    FEATURES = "features"  #: Distribution inputs produced by a model.
    INPUTS = "inputs"  #: A window of past steps (:mod:`rl8lite.views`): ``[B, size, ...]``.
    PADDING_MASK = "padding_mask"  #: Which steps of a window are padding: ``[B, size]`` bool.
    VIEWS = "views"  #: Windows a policy built for a batch (``Policy.sample(return_views=True)``).
    STATES = "states"  #: A recurrent model's states (``HIDDEN_STATES``, ``CELL_STATES``).
    HIDDEN_STATES = "hidden_states"  #: An LSTM's hidden states ``h``, under ``STATES``.
    CELL_STATES = "cell_states"  #: An LSTM's cell states ``c``, under ``STATES``.
