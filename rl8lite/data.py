"""Names shared by every module: buffer keys and the device alias (rl8's names)."""

from __future__ import annotations

import torch

Device = str | torch.device


class DataKeys:
    """Keys of the entries in :attr:`Algorithm.buffer` and in env outputs."""

    #: Observations from the environment (env output and buffer entry).
    OBS = "obs"
    #: Rewards from the environment, shape ``[N, 1]``.
    REWARDS = "rewards"
    #: The episode ended in a terminal state: no bootstrapping past it.
    TERMINATED = "terminated"
    #: The episode was cut short (time limit): bootstrapped from its last state.
    TRUNCATED = "truncated"
    #: Last observation before an env's own reset of a finished copy.
    FINAL_OBS = "final_obs"
    #: Actions sampled by the policy.
    ACTIONS = "actions"
    #: Log-probability of ``actions`` under the policy that sampled them.
    LOGP = "logp"
    #: Value estimates of the observations.
    VALUES = "values"
    #: Value estimates of ``final_obs`` (or their stand-ins) for truncated copies.
    FINAL_VALUES = "final_values"
    #: Generalized advantage estimates.
    ADVANTAGES = "advantages"
    #: Value-function targets (advantages + values).
    RETURNS = "returns"
    #: Running discounted return used to scale rewards (reward normalisation).
    REVERSED_DISCOUNTED_RETURNS = "reversed_discounted_returns"
    #: Mask of valid actions inside a composite observation.
    ACTION_MASK = "action_mask"
    #: Distribution inputs produced by a model.
    FEATURES = "features"
    #: A window of past steps (:mod:`rl8lite.views`), padding included: ``[B, size, ...]``.
    INPUTS = "inputs"
    #: Which steps of a window are padding (``True``) rather than data: ``[B, size]`` bool.
    PADDING_MASK = "padding_mask"
