"""Schedules of the learning rate and the entropy coefficient over env transitions (rl8's).

A schedule is a list of ``(env_steps, value)`` pairs sorted by ``env_steps``,
the first at 0. ``"step"`` holds each value until the next pair's step count;
``"interp"`` interpolates linearly between pairs and holds the last value.

Examples:
    >>> from rl8lite.schedulers import EntropyScheduler
    >>> sched = EntropyScheduler(0.01, schedule=[(0, 0.01), (1000, 0.0)], kind="interp")
    >>> sched.step(500)
    0.005
"""

from __future__ import annotations

import bisect
from typing import Literal

import torch

ScheduleKind = Literal["step", "interp"]
Schedule = list[tuple[int, float]]


def validate_schedule(name: str, schedule: Schedule | None, kind: str) -> None:
    """Raise ``ValueError`` naming ``name`` if the schedule or its kind is malformed."""
    if kind not in ("step", "interp"):
        raise ValueError(f"{name}_kind must be 'step' or 'interp', received {kind!r}")
    if schedule is None:
        return
    if not schedule:
        raise ValueError(f"{name} must be None or a non-empty list of (env_steps, value)")
    steps = []
    for item in schedule:
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise ValueError(f"{name} entries must be (env_steps, value) pairs, received {item!r}")
        steps.append(item[0])
        if item[1] < 0:
            raise ValueError(f"{name} values must be >= 0, received {item[1]!r}")
    if steps[0] != 0:
        raise ValueError(f"{name} must start at env_steps 0, received {steps[0]!r}")
    if any(b <= a for a, b in zip(steps, steps[1:])):
        raise ValueError(f"{name} env_steps must increase strictly, received {steps}")


def scheduled_value(schedule: Schedule, kind: ScheduleKind, env_steps: int) -> float:
    """The value of ``schedule`` after ``env_steps`` env transitions."""
    steps = [s for s, _ in schedule]
    i = bisect.bisect_right(steps, env_steps) - 1
    if kind == "step" or i == len(schedule) - 1:
        return float(schedule[i][1])
    (s0, v0), (s1, v1) = schedule[i], schedule[i + 1]
    return float(v0 + (v1 - v0) * (env_steps - s0) / (s1 - s0))


class EntropyScheduler:
    """The entropy coefficient, constant or following a schedule."""

    def __init__(
        self, coeff: float, *, schedule: Schedule | None = None, kind: ScheduleKind = "step"
    ) -> None:
        validate_schedule("entropy_coeff_schedule", schedule, kind)
        self.schedule = schedule
        self.kind = kind
        self.coeff = float(schedule[0][1]) if schedule else float(coeff)

    def step(self, env_steps: int) -> float:
        """Move to ``env_steps`` and return the coefficient."""
        if self.schedule:
            self.coeff = scheduled_value(self.schedule, self.kind, env_steps)
        return self.coeff


class LRScheduler:
    """Sets every param group's learning rate from a schedule (no-op without one)."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        schedule: Schedule | None = None,
        kind: ScheduleKind = "step",
    ) -> None:
        validate_schedule("lr_schedule", schedule, kind)
        self.optimizer = optimizer
        self.schedule = schedule
        self.kind = kind
        if schedule:
            self._set(float(schedule[0][1]))

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def _set(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    def step(self, env_steps: int) -> float:
        """Move to ``env_steps`` and return the learning rate."""
        if self.schedule:
            self._set(scheduled_value(self.schedule, self.kind, env_steps))
        return self.lr
