"""A feedforward policy that sees windows of past observations (its model's view requirements)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from ..data import DataKeys
from ..policies import Policy
from ..specs import Spec, spec_leaves
from ..views import PaddedRollingWindow, episode_steps, window_at_last_step
from .buffer import episode_ends, flat_rows, index_dtype
from .carries import Feedforward, Observation, Pair, Recurrence, Recurrent
from .config import ConfigError, RecurrentAlgorithmConfig

Path = tuple[str, ...]


def windows_seen(model: Any, observation_spec: Spec) -> str | None:
    """A message naming the windows of past observations ``model`` sees, or ``None``."""
    if not (entries := plan_windows(model, observation_spec)):
        return None
    keys = sorted(map(_key, entries))
    return f"{type(model).__name__} sees windows of past observations {keys} (view requirements)"


def plan_windows(model: Any, observation_spec: Spec) -> dict[Path, int]:
    """The window size (``shift + 1 > 1``) of each observation path ``model``'s view requires."""
    requirements = getattr(model, "view_requirements", None) or {}
    leaves = [path for path, _ in spec_leaves(observation_spec)]
    sizes: dict[Path, int] = {}
    name = type(model).__name__
    for key, requirement in requirements.items():
        parts = (key,) if isinstance(key, str) else tuple(key)
        if parts[0] != DataKeys.OBS:
            raise ConfigError(f"{name}.view_requirements key {key!r}: the algorithm windows"
                              " observations only ('obs' or ('obs', key, ...))")
        path = parts[1:]
        covered = [leaf for leaf in leaves if leaf[: len(path)] == path]
        if not covered:
            raise ConfigError(f"{name}.view_requirements key {key!r} is not in the observation"
                              f" spec, whose entries are {sorted(map(_key, leaves))}")
        if requirement.shift and requirement.method is not PaddedRollingWindow:
            raise ConfigError(f"{name}.view_requirements[{key!r}] uses"
                              f" {requirement.method.__name__}, which drops the first `shift` steps"
                              " of every sequence; a collect acts at every step: use"
                              " method='padded_rolling_window'")
        sizes.update(dict.fromkeys(covered, requirement.shift + 1))
    return {path: size for path, size in sizes.items() if size > 1}


def _entry(obs: Observation, path: Path) -> torch.Tensor:
    return obs if not path else obs.get(path)


def _key(path: Path) -> str:
    return ".".join((DataKeys.OBS, *path))


def _padded(window: torch.Tensor, padding: torch.Tensor, *, zeroed: bool = False) -> TensorDict:
    """``{INPUTS: window zeroed at padding, PADDING_MASK: padding}``, batch ``[B, size]``."""
    if not zeroed:
        window = window.masked_fill(padding.reshape(*padding.shape, *[1] * (window.dim() - 2)), 0)
    # unvalidated (the shapes are right by construction): saves a few us per step or chunk
    return TensorDict._new_unsafe({DataKeys.INPUTS: window, DataKeys.PADDING_MASK: padding},
                                  batch_size=padding.shape)


class Windowed(Feedforward):
    """A feedforward policy whose model sees windows of past observations (earlier episodes:
    padding), each entry kept in a store with ``size - 1`` earlier steps in front."""

    def __init__(self, policy: Policy, buffer: TensorDict, entries: dict[Path, int],
                 chunk_rows: int | None, *, compile_sampling: bool = False) -> None:
        num_envs, horizon, device = buffer.batch_size[0], buffer.batch_size[1] - 1, buffer.device
        super().__init__(policy, horizon, chunk_rows, compile_sampling=compile_sampling)
        self.buffer, self.entries = buffer, entries
        # per path: the store; its rows then a zero row, read as padding (rows_with_zeros); per
        # window position, steps back from the last (offsets) and store-row offsets (positions);
        # per buffer row, the first store row of its window (first_rows)
        self.stores: dict[Path, torch.Tensor] = {}
        self.rows_with_zeros, self.offsets, self.positions, self.first_rows = {}, {}, {}, {}
        #: dtype of store row indices: int32 where every row of every store fits.
        self.index_dtype = index_dtype(num_envs * (max(entries.values()) + horizon) + 1)
        for path, size in entries.items():
            history, length = size - 1, size + horizon
            current = _entry(buffer[DataKeys.OBS], path)
            rows = current.new_zeros(num_envs * length + 1, *current.shape[2:])
            store = rows[:-1].view(num_envs, length, *current.shape[2:])
            store[:, history:] = current
            buffer.set((DataKeys.OBS, *path), store[:, history:], inplace=False)
            self.stores[path], self.rows_with_zeros[path] = store, rows
            self.offsets[path] = torch.arange(history, -1, -1, device=device)
            self.positions[path] = torch.arange(size, device=device, dtype=self.index_dtype)
            # n * length + c: the first store row of the window ending at column c of copy n
            starts = (torch.arange(num_envs, device=device)[:, None] * length
                      + torch.arange(horizon + 1, device=device))
            self.first_rows[path] = starts.reshape(-1).to(self.index_dtype)
        #: Largest episode index that matters: a window of ``size`` needs ``size - 1`` steps.
        self.cap = max(entries.values()) - 1
        #: Per copy, the time index of its episode's first step (``<= 0``: in an earlier collect).
        self.start = torch.zeros(num_envs, dtype=torch.long, device=device)
        #: Per copy, the episode index of the collect's first observation (capped).
        self.initial = torch.zeros(num_envs, dtype=torch.long, device=device)

    def restart(self) -> None:
        self.start.zero_()
        self.initial.zero_()

    def resume(self) -> None:
        """The last ``size`` columns of each store move to the front; episode indices carry over."""
        horizon = self.horizon
        for store in self.stores.values():
            history, tail = store.shape[1] - horizon - 1, store[:, horizon:]
            store[:, : history + 1] = tail.clone() if horizon <= history else tail
        # in place: new tensors made here would be inference tensors, which checkpoints can't load
        torch.clamp(horizon - self.start, max=self.cap, out=self.initial)
        torch.neg(self.initial, out=self.start)

    def act(self, obs: Observation, t: int, deterministic: bool) -> tuple[torch.Tensor, ...]:
        return super().act(self._inputs_at(obs, t), t, deterministic)

    def sample(self, obs: Observation, t: int, deterministic: bool) -> Pair:
        return super().sample(self._inputs_at(obs, t), t, deterministic)

    def end_step(self, t: int, terminated: torch.Tensor, truncated: torch.Tensor,
                 final_obs: Any) -> None:
        self.start.masked_fill_((terminated | truncated).reshape(-1), t + 1)

    def values(self, obs: Observation) -> torch.Tensor:
        """Values of the observations after the last step (their windows end at ``T``)."""
        return super().values(self._inputs_at(obs, self.horizon))

    def _inputs_at(self, obs: Observation, t: int) -> Observation:
        """``obs`` with each windowed entry replaced by its window ending at step ``t``."""
        steps = (t - self.start).unsqueeze(-1)
        return _with_windows(obs, {path: _padded(self.stores[path][:, t : t + size],
                                                 self.offsets[path] > steps)
                                   for path, size in self.entries.items()})

    def episode_steps(self) -> torch.Tensor:
        """``[N, T + 1]`` index of each buffered observation in its episode."""
        return episode_steps(episode_ends(self.buffer), initial=self.initial)

    def obs_rows(self, buffer: TensorDict) -> WindowRows:
        return WindowRows(self, self.episode_steps().reshape(-1))

    def final_obs_values(self, final_obs: Any, copies: torch.Tensor,
                         steps: torch.Tensor) -> torch.Tensor:
        """V(final_obs) of truncated copies (windows shifted by one, ``final_obs`` last)."""
        before = self.episode_steps()[copies, steps].unsqueeze(-1)
        windows = {}
        for path, size in self.entries.items():
            # the windows ending at every buffer column, [N, T + 1, size, ...] (a strided view)
            every = self.stores[path].unfold(1, size, 1).movedim(-1, 2)
            window = torch.cat([every[copies, steps, 1:], _entry(final_obs, path).unsqueeze(1)], 1)
            windows[path] = _padded(window, self.offsets[path] > before + 1)
        return Feedforward.values(self, _with_windows(final_obs, windows))

    def first_step_inputs(self, obs: Observation) -> Observation:
        """What the model sees at an episode's first step: windows of padding and ``obs``."""
        return _with_windows(obs, {path: window_at_last_step(_entry(obs, path).unsqueeze(1), size)
                                   for path, size in self.entries.items()})

    def state_bytes(self) -> int:
        history = sum(self._history(store).nbytes for store in self.stores.values())
        return history + self.start.nbytes + self.initial.nbytes

    def _history(self, store: torch.Tensor) -> torch.Tensor:
        return store[:, : store.shape[1] - self.horizon - 1]

    def state_dict(self) -> dict[str, Any]:
        history = {_key(p): self._history(store).cpu().clone() for p, store in self.stores.items()}
        return {"history": history, "start": self.start.cpu().clone(),
                "initial": self.initial.cpu().clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for path, store in self.stores.items():
            self._history(store).copy_(state["history"][_key(path)])
        self.start.copy_(state["start"])
        self.initial.copy_(state["initial"])


def _with_windows(obs: Observation, windows: dict[Path, TensorDict]) -> Observation:
    """``obs`` with the entries ``windows`` names replaced by their windows (``obs`` untouched)."""
    if () in windows:
        return windows[()]
    out = obs.copy()
    for path, window in windows.items():
        out.set(path, window)
    return out


def _select_rows(rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``rows.index_select(0, index)``, each row read as one scalar when its bytes make one:
    ``index_select`` copies small rows one at a time, 3x slower for CartPole's 16-byte rows."""
    width = rows[0].nbytes if rows.dim() > 1 else rows.element_size()
    scalar = _SCALAR_OF_SIZE.get(width)
    if scalar is None or not rows.is_contiguous() or rows.dim() < 2 or rows.dtype == scalar:
        return rows.index_select(0, index)
    as_scalars = rows.view(rows.shape[0], -1).view(scalar).view(-1)
    return as_scalars.index_select(0, index).view(rows.dtype).view(-1, *rows.shape[1:])


_SCALAR_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64,
                   16: torch.complex128}


class WindowRows:
    """The model's input at ``[N * (T + 1)]`` buffer rows, built on indexing."""

    def __init__(self, windowed: Windowed, steps: torch.Tensor) -> None:
        self.windowed, self.steps, self.total = windowed, steps, steps.shape[0]
        obs = windowed.buffer[DataKeys.OBS]
        self.plain: dict[Path, torch.Tensor] = {}
        if isinstance(obs, TensorDict):
            for key, value in obs.items(include_nested=True, leaves_only=True):
                path = (key,) if isinstance(key, str) else tuple(key)
                if path not in windowed.entries:
                    self.plain[path] = flat_rows(value)

    @property
    def shape(self) -> torch.Size:
        return torch.Size([self.total])

    def __getitem__(self, rows: torch.Tensor | slice) -> Observation:
        if isinstance(rows, slice):
            rows = torch.arange(*rows.indices(self.total), device=self.steps.device)
        rows = rows.to(self.windowed.index_dtype)
        steps = self.steps.index_select(0, rows).unsqueeze(-1)
        windows, windowed = {}, self.windowed
        for path in windowed.entries:
            # one index_select of store rows, padding reading the zero row (a window ending at
            # buffer column c starts at store column c): 1.5-2x faster than zeroing windows
            store_rows = windowed.rows_with_zeros[path]
            padding = windowed.offsets[path] > steps
            first = windowed.first_rows[path].index_select(0, rows)
            index = first.unsqueeze(-1) + windowed.positions[path]
            index.masked_fill_(padding, store_rows.shape[0] - 1)
            window = _select_rows(store_rows, index.reshape(-1))
            windows[path] = _padded(window.view(*index.shape, *store_rows.shape[1:]), padding,
                                    zeroed=True)
        if () in windows:
            return windows[()]
        out = TensorDict({}, batch_size=[rows.shape[0]], device=self.steps.device)
        for path, value in {**{p: v[rows] for p, v in self.plain.items()}, **windows}.items():
            out.set(path, value)
        return out


def carry_for(policy: Policy, config: Any, device: torch.device, chunk_rows: int | None,
              buffer: TensorDict, observation_spec: Any) -> Recurrence:
    """The carry of ``policy``: :class:`Recurrent`, :class:`Windowed` or :class:`Feedforward`."""
    entries = plan_windows(policy.model, observation_spec)
    if not policy.recurrent:
        # compiled sampling measured slower than eager on CPUs
        compile_sampling = config.compile is True and device.type != "cpu"
        if entries:
            return Windowed(policy, buffer, entries, chunk_rows, compile_sampling=compile_sampling)
        return Feedforward(policy, config.horizon, chunk_rows, compile_sampling=compile_sampling)
    name = type(policy.model).__name__
    if not isinstance(config, RecurrentAlgorithmConfig):
        raise ConfigError(f"{name} is a RecurrentModel: train it with a RecurrentAlgorithmConfig"
                          " (RecurrentAlgorithm), which sets seq_len and seqs_per_state_reset")
    if entries:
        raise ConfigError(f"{name} is a RecurrentModel with view requirements that window"
                          f" {sorted(map(_key, entries))}: a recurrent model sees the past through"
                          " its state; use shift=0, or a feedforward Model")
    return Recurrent(policy, num_envs=config.num_envs, horizon=config.horizon,
                     seq_len=config.seq_len, seqs_per_state_reset=config.seqs_per_state_reset,
                     chunk_rows=chunk_rows, device=device)
