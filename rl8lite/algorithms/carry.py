"""Which carry a policy needs from one time step to the next: nothing, windows of past
observations, or a recurrent state (see :mod:`~rl8lite.algorithms.recurrence`)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from .config import ConfigError, RecurrentAlgorithmConfig
from .policy import Policy
from .recurrence import Feedforward, Recurrence, Recurrent
from .windowed import Windowed, plan_windows


def recurrence_for(
    policy: Policy, config: Any, device: torch.device, chunk_rows: int | None, buffer: TensorDict, observation_spec: Any
) -> Recurrence:
    """:class:`Recurrent` for a recurrent model (which needs a recurrent config), else
    :class:`Windowed` for a model with view requirements that window observations, else
    :class:`Feedforward`.

    Raises:
        ConfigError: A recurrent model with a recurrent config missing, or with windows.
    """
    entries = plan_windows(policy.model, observation_spec)
    if not policy.recurrent:
        # On a CPU the compiled sampling step measured slower than eager at every size
        # (13% at 8 envs, 1% at 4096; one thread, 2x256 MLPs): only the update is compiled.
        compile_sampling = config.compile and device.type != "cpu"
        if entries:
            return Windowed(policy, buffer, entries, chunk_rows, compile_sampling=compile_sampling)
        return Feedforward(policy, config.horizon, chunk_rows, compile_sampling=compile_sampling)
    name = type(policy.model).__name__
    if not isinstance(config, RecurrentAlgorithmConfig):
        raise ConfigError(
            f"{name} is a RecurrentModel: train it with a RecurrentAlgorithmConfig"
            " (RecurrentAlgorithm), which sets seq_len and seqs_per_state_reset"
        )
    if entries:
        windowed = sorted(".".join(("obs", *e.path)) for e in entries)
        raise ConfigError(
            f"{name} is a RecurrentModel with view requirements that window {windowed}: a recurrent"
            " model sees the past through its state; use shift=0, or a feedforward Model"
        )
    return Recurrent(
        policy, num_envs=config.num_envs, horizon=config.horizon, seq_len=config.seq_len,
        seqs_per_state_reset=config.seqs_per_state_reset, chunk_rows=chunk_rows, device=device,
    )
