"""What the PPO update reads: chunks gathered straight from the rollout buffer.

The buffer is ``[N, T + 1, ...]`` (the last column holds the next collect's
first observation and the bootstrap value). Flattening its first ``T``
columns into ``N * T`` samples would copy the whole buffer once per update;
instead each chunk's samples are gathered from the buffer flattened to
``[N * (T + 1), ...]`` rows, which is a view. The algorithm maps its update
units (time steps, or sequences of them) to those rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict

from ..data import DataKeys

#: Buffer entries every PPO update reads.
UPDATE_KEYS = (
    DataKeys.OBS,
    DataKeys.ACTIONS,
    DataKeys.LOGP,
    DataKeys.VALUES,
    DataKeys.RETURNS,
    DataKeys.ADVANTAGES,
)


def flat_rows(x: torch.Tensor | TensorDict) -> torch.Tensor | TensorDict:
    """``[N, T + 1, ...]`` as ``[N * (T + 1), ...]`` rows (a view of a contiguous buffer entry)."""
    rows = x.shape[0] * x.shape[1]
    return x.reshape(rows) if isinstance(x, TensorDict) else x.reshape(rows, *x.shape[2:])


@dataclass
class UpdateBatch:
    """One update's samples, read a chunk at a time.

    Attributes:
        rows: Buffer entries as ``[N * (T + 1), ...]`` rows (see :func:`flat_rows`).
        units: Per-unit tensors (e.g. a sequence's initial state), indexed by unit.
        unit_rows: Maps ``[B]`` unit indices to the ``rows`` index of their samples
            (``[B]``, or ``[B, L]`` for sequences of ``L`` steps).
        advantage_normalization: ``(mean, std + eps)`` of the buffer's advantages
            (:func:`rl8lite.advantages.normalization`), applied to each chunk as
            :func:`~rl8lite.advantages.normalize` would, or ``None`` to use them as they are.
    """

    rows: dict[str, Any]
    units: dict[str, Any]
    unit_rows: Callable[[torch.Tensor], torch.Tensor]
    advantage_normalization: tuple[torch.Tensor, torch.Tensor] | None = None

    def gather(self, units: torch.Tensor) -> dict[str, Any]:
        """The samples of update units ``units`` (a chunk), keyed as the buffer."""
        rows = self.unit_rows(units)
        chunk = {key: value[rows] for key, value in self.rows.items()}
        chunk.update({key: value[units] for key, value in self.units.items()})
        if self.advantage_normalization is not None:
            mean, scale = self.advantage_normalization
            chunk[DataKeys.ADVANTAGES] = (chunk[DataKeys.ADVANTAGES] - mean) / scale
        return chunk
