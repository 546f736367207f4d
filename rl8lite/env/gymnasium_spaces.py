"""Gymnasium spaces as rl8lite specs, and batches of their numpy values as tensors."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict

from ..specs import Bounded, Categorical, Composite, MultiCategorical, Spec, Unbounded

ObservationConverter = Callable[[Any, int], "torch.Tensor | TensorDict"]
ActionConverter = Callable[[torch.Tensor], np.ndarray]


class UnsupportedSpaceError(TypeError):
    """A Gymnasium space has no rl8lite spec, or no policy samples it."""


def to_tensor(array: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A copy of ``array`` (vector envs reuse theirs) as a ``dtype`` tensor on ``device``."""
    array = np.asarray(array)
    if device.type == "cpu":
        return torch.from_numpy(array.astype(_numpy_dtype(dtype), order="C"))
    if not array.flags.writeable:  # torch warns on read-only arrays, even when it copies
        array = array.copy()
    return torch.from_numpy(array).to(device=device, dtype=dtype)  # one copy, to the device


@functools.cache
def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


def observation_mapping(space: spaces.Space, device: torch.device
                        ) -> tuple[Spec, ObservationConverter]:
    """The spec of one copy's observations and the converter ``(batch, n) -> tensor``: ``Box``
    (float64 as float32), ``Discrete``/``MultiDiscrete`` (indices from ``start``), ``MultiBinary``,
    and ``Dict``/``Tuple`` of them (a Tuple's keys: ``"0"``...)."""
    if isinstance(space, spaces.Box):
        dtype = torch.from_numpy(np.empty(0, dtype=space.dtype)).dtype
        dtype = torch.float32 if dtype == torch.float64 else dtype
        if np.isneginf(space.low).all() and np.isposinf(space.high).all():
            spec: Spec = Unbounded(space.shape, device=device, dtype=dtype)
        else:
            low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
            spec = Bounded(low, high, space.shape, device, dtype)
        return spec, lambda batch, n: to_tensor(batch, dtype, device)
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        spec = Categorical(int(space.n), shape=[1], device=device)
        return spec, lambda batch, n: (to_tensor(batch, torch.long, device) - start).view(n, 1)
    if isinstance(space, spaces.MultiDiscrete):
        start = torch.as_tensor(space.start, dtype=torch.long, device=device)
        spec = MultiCategorical(torch.as_tensor(space.nvec), device=device)
        return spec, lambda batch, n: to_tensor(batch, torch.long, device) - start
    if isinstance(space, spaces.MultiBinary):
        spec = Categorical(2, shape=space.shape, device=device, dtype=torch.int8)
        return spec, lambda batch, n: to_tensor(batch, torch.int8, device)
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        items = space.spaces.items() if isinstance(space, spaces.Dict) else enumerate(space.spaces)
        parts = {str(key): (key, *observation_mapping(sub, device)) for key, sub in items}
        composite = Composite({name: spec for name, (_, spec, _) in parts.items()}, device=device)

        def convert(batch: Any, n: int) -> TensorDict:
            entries = {name: part(batch[key], n) for name, (key, _, part) in parts.items()}
            return TensorDict(entries, batch_size=[n], device=device)

        return composite, convert
    raise UnsupportedSpaceError(f"observation space {space} has no rl8lite spec: Box, Discrete,"
                                " MultiDiscrete, MultiBinary, and Dict/Tuple of them are supported"
                                " (a gymnasium ObservationWrapper can offer one)")


def action_mapping(space: spaces.Space, device: torch.device) -> tuple[Spec, ActionConverter]:
    """The action spec the policy samples and the converter of its actions for the env:
    ``Discrete`` (``a + start``) and float ``Box`` (clipped; ``Unbounded`` where float32 cannot
    span the bounds)."""
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        spec: Spec = Categorical(int(space.n), shape=[1], device=device)
        return spec, lambda actions: actions.detach().cpu().numpy().reshape(-1) + start
    if isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating):
        low, high = space.low, space.high
        # float32 samples: envs often write "unbounded" as +-1e300 or +-finfo(float32).max
        with np.errstate(over="ignore", invalid="ignore"):
            width = high.astype(np.float32) - low.astype(np.float32)
        if np.isfinite(width).all():
            spec = Bounded(torch.as_tensor(low), torch.as_tensor(high), space.shape, device)
        else:
            spec = Unbounded(space.shape, device=device, dtype=torch.float32)

        # torch's clamp costs half of np.clip's on a policy's few rows; it clamps in the space's
        # dtype, where the bounds are exact, so rounding first gives np.clip's result
        low_t, high_t = torch.from_numpy(low), torch.from_numpy(high)

        def clipped(actions: torch.Tensor) -> np.ndarray:
            if actions.requires_grad or not actions.is_cpu:
                actions = actions.detach().cpu()
            return torch.clamp(actions.to(low_t.dtype), low_t, high_t).numpy()

        return spec, clipped
    raise UnsupportedSpaceError(f"action space {space} cannot be served by an rl8lite policy,"
                                " which samples Discrete or float Box actions (a gymnasium"
                                " ActionWrapper can offer one)")
