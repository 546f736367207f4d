"""What a policy carries from one time step to the next, in the rollout and in the update."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from ..data import DataKeys
from ..policies import Policy
from ..runtime.memory import tensor_bytes
from .buffer import UPDATE_KEYS, UpdateBatch, episode_ends, flat_rows
from .chunks import in_chunks

Observation = torch.Tensor | TensorDict
Pair = tuple[torch.Tensor, torch.Tensor]
Triple = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class Recurrence:
    """What the rollout and the update call on a policy's carry; these defaults carry nothing."""

    #: Time steps per update unit: 1, or ``seq_len`` for sequences.
    unit_length = 1
    #: Whether the rollout samples actions alone and values every observation after it.
    values_after_rollout = False
    #: The sampling step as a captured CUDA graph (:mod:`rl8lite.algorithms.graphs`), if any.
    graphed_sample: Any = None

    def __init__(self, policy: Policy, horizon: int, chunk_rows: int | None) -> None:
        self.policy, self.horizon, self.chunk_rows = policy, horizon, chunk_rows

    def restart(self) -> None:
        """An env reset: every copy's episode starts at the collect's first step."""

    def resume(self) -> None:
        """The env goes on from where the last collect ended."""

    def end_step(self, t: int, terminated: torch.Tensor, truncated: torch.Tensor,
                 final_obs: Any) -> None:
        """The episode ends of step ``t`` (and its ``final_obs``, if the env returns them)."""

    def update_batch(self, buffer: TensorDict, normalization: Pair | None) -> UpdateBatch:
        """The update's samples, read from ``buffer`` a chunk at a time."""
        rows = {key: self.obs_rows(buffer) if key == DataKeys.OBS else flat_rows(buffer[key])
                for key in UPDATE_KEYS}
        return UpdateBatch(rows, self._units(buffer), self.unit_rows, normalization)

    def obs_rows(self, buffer: TensorDict) -> Any:
        """The model's input at every ``[N * (T + 1)]`` buffer row."""
        return flat_rows(buffer[DataKeys.OBS])

    def _units(self, buffer: TensorDict) -> dict[str, torch.Tensor]:
        return {}

    def first_step_inputs(self, obs: Observation) -> Observation:
        """What the model sees for observations with no past."""
        return obs

    def state_bytes(self) -> int:
        return 0

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class Feedforward(Recurrence):
    """A feedforward policy: nothing carried; update units are single time steps."""

    def __init__(self, policy: Policy, horizon: int, chunk_rows: int | None, *,
                 compile_sampling: bool = False) -> None:
        super().__init__(policy, horizon, chunk_rows)
        compiled = torch.compile if compile_sampling else (lambda fn: fn)
        self.act_fn, self.sample_fn = compiled(policy.act), compiled(policy.sample_actions)

    @property
    def values_after_rollout(self) -> bool:  # type: ignore[override]
        # Checked every collect: hooks added to the model after building turn it off.
        return self.policy.separable

    def act(self, obs: Observation, t: int, deterministic: bool) -> tuple[torch.Tensor, ...]:
        """``(actions, logp, values)`` of step ``t``."""
        return in_chunks(self.act_fn, obs, size=self.chunk_rows, deterministic=deterministic)

    def sample(self, obs: Observation, t: int, deterministic: bool) -> Pair:
        """``(actions, logp)`` of step ``t`` from the actor alone (:attr:`values_after_rollout`)."""
        if self.graphed_sample is not None:
            return self.graphed_sample(obs, deterministic)
        return in_chunks(self.sample_fn, obs, size=self.chunk_rows, deterministic=deterministic)

    def values(self, obs: Observation) -> torch.Tensor:
        """Values of ``obs`` (the bootstrap observation after the last step)."""
        return in_chunks(self.policy.values, obs, size=self.chunk_rows)

    def fill_values(self, buffer: TensorDict) -> None:
        obs_rows, value_rows = self.obs_rows(buffer), flat_rows(buffer[DataKeys.VALUES])
        size = self.chunk_rows or buffer.batch_size[0]
        for start in range(0, value_rows.shape[0], size):
            value_rows[start : start + size] = self.policy.values(obs_rows[start : start + size])

    def final_obs_values(self, final_obs: Any, copies: torch.Tensor,
                         steps: torch.Tensor) -> torch.Tensor:
        """V(final_obs) of the truncated copies ``copies`` at time steps ``steps``."""
        return self.values(final_obs)

    def unit_rows(self, units: torch.Tensor) -> torch.Tensor:
        """Rows of the ``[N * (T + 1)]``-flattened buffer holding update units ``units``."""
        # unit u = n * T + t (copy n, step t) is row n * (T + 1) + t = u + u // T
        return units + units // self.horizon

    def evaluate(self, chunk: dict[str, Any]) -> Triple:
        """``(logp, entropy, values)`` ``[samples, 1]`` of a chunk under the current policy."""
        return self.policy.evaluate(chunk[DataKeys.OBS], chunk[DataKeys.ACTIONS])


class Recurrent(Recurrence):
    """A recurrent policy: its state is carried through the rollout (zeroed at episode ends and
    resets) and stored at each sequence start, whence the update unrolls ``seq_len`` steps."""

    def __init__(self, policy: Policy, *, num_envs: int, horizon: int, seq_len: int,
                 seqs_per_state_reset: int, chunk_rows: int | None, device: torch.device) -> None:
        super().__init__(policy, horizon, chunk_rows)
        self.num_envs, self.device = num_envs, device
        self.unit_length = self.seq_len = seq_len
        self.seqs_per_state_reset = seqs_per_state_reset
        self.states = policy.init_states(num_envs)
        state_size = policy.network.state_size
        self.sequence_states = torch.zeros(num_envs, horizon // seq_len, state_size, device=device)
        self.seqs = 0
        #: Whether the next sequence starts from :meth:`Policy.init_states` (after an env reset).
        self.restarting = False
        # truncated copies' final_obs are valued in the rollout on the CPU, else (no host sync per
        # step) after it from every step's state (1 GiB at 65536 envs, horizon 32, 2 x 64 state)
        self.value_final_obs_in_rollout = device.type == "cpu"
        self.final_obs_values_kept: torch.Tensor | None = None
        self.final_states: torch.Tensor | None = None

    def restart(self) -> None:
        self.restarting, self.seqs = True, 0

    def act(self, obs: Observation, t: int, deterministic: bool) -> tuple[torch.Tensor, ...]:
        if t % self.seq_len == 0:
            period = self.seqs_per_state_reset
            if self.restarting or (period > 0 and self.seqs % period == 0):
                self.states, self.restarting = self.policy.init_states(self.num_envs), False
            self.sequence_states[:, t // self.seq_len] = self.states
            self.seqs += 1
        actions, logp, values, self.states = in_chunks(
            self.policy.act_recurrent, obs, self.states, size=self.chunk_rows,
            deterministic=deterministic)
        return actions, logp, values

    def end_step(self, t: int, terminated: torch.Tensor, truncated: torch.Tensor,
                 final_obs: Any) -> None:
        n, states = self.num_envs, self.states
        if final_obs is not None and self.value_final_obs_in_rollout:
            if self.final_obs_values_kept is None:
                self.final_obs_values_kept = torch.empty(n, self.horizon, 1, device=self.device)
            copies = truncated.reshape(-1).nonzero().flatten()
            if copies.numel():
                values = self._values_from(final_obs[copies], states[copies])
                self.final_obs_values_kept[copies, t] = values
        elif final_obs is not None:
            if self.final_states is None:
                self.final_states = states.new_empty(n, self.horizon, states.shape[-1])
            self.final_states[:, t] = states
        self.states = states * (~(terminated | truncated)).to(states.dtype)

    def values(self, obs: Observation) -> torch.Tensor:
        return self._values_from(obs, self.states)

    def final_obs_values(self, final_obs: Any, copies: torch.Tensor,
                         steps: torch.Tensor) -> torch.Tensor:
        if self.final_obs_values_kept is not None:
            return self.final_obs_values_kept[copies, steps]
        assert self.final_states is not None
        return self._values_from(final_obs, self.final_states[copies, steps])

    def _values_from(self, obs: Observation, states: torch.Tensor) -> torch.Tensor:
        policy = self.policy
        return in_chunks(lambda o, s: policy.network(policy.normalize(o), s)[1], obs, states,
                         size=self.chunk_rows)

    def _units(self, buffer: TensorDict) -> dict[str, torch.Tensor]:
        ends = episode_ends(buffer)
        # reset before step t if the episode ended at t - 1 (the sequence-start states already are)
        resets = torch.cat([torch.zeros_like(ends[:, :1]), ends[:, :-1]], dim=1)
        resets = resets.reshape(-1, self.seq_len)
        resets[:, 0] = False
        return {"states": self.sequence_states.flatten(0, 1), "resets": resets}

    def unit_rows(self, units: torch.Tensor) -> torch.Tensor:
        """``[B, seq_len]`` buffer rows of sequences ``units``."""
        # sequence s = n * S + j (copy n, S = T / seq_len per copy) starts at row
        # n * (T + 1) + j * seq_len = s * seq_len + s // S
        starts = units * self.seq_len + units // (self.horizon // self.seq_len)
        return starts[:, None] + torch.arange(self.seq_len, device=units.device)

    def evaluate(self, chunk: dict[str, Any]) -> Triple:
        return self.policy.evaluate_sequences(chunk[DataKeys.OBS], chunk[DataKeys.ACTIONS],
                                              chunk["states"], chunk["resets"])

    def state_bytes(self) -> int:
        kept = (self.states, self.sequence_states, self.final_obs_values_kept, self.final_states)
        return tensor_bytes(t for t in kept if t is not None)

    def state_dict(self) -> dict[str, Any]:
        states = {k: getattr(self, k).cpu().clone() for k in ("states", "sequence_states")}
        return {**states, "seqs": self.seqs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.states = state["states"].to(self.device)
        self.sequence_states = state["sequence_states"].to(self.device)
        self.seqs = int(state["seqs"])
