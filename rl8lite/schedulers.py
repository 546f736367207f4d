"""Schedules of the learning rate and the entropy coefficient over env steps (rl8's): lists of
``(env_steps, value)`` from 0; ``"step"`` holds each value until the next, ``"interp"``
interpolates linearly and holds the last.

Examples:
    >>> from rl8lite.schedulers import EntropyScheduler
    >>> sched = EntropyScheduler(0.01, schedule=[(0, 0.01), (1000, 0.0)], kind="interp")
    >>> sched.step(500)
    0.005
"""

from __future__ import annotations

import bisect
import itertools
import math
import numbers
from typing import Literal

import torch

ScheduleKind = Literal["step", "interp"]
Schedule = list[tuple[int, float]]


def validate_schedule(name: str, schedule: Schedule | None, kind: str) -> None:
    """A ``ValueError`` naming ``name`` unless ``kind`` is known and ``schedule`` is ``(env_steps,
    value)`` pairs from 0, whole (YAML's ``1e6`` too) and increasing, values real, finite, >= 0."""
    if kind not in ("step", "interp"):
        raise ValueError(f"{name}_kind must be 'step' or 'interp', received {kind!r}")
    if schedule is None:
        return
    if not schedule:
        raise ValueError(f"{name} must be None or a non-empty list of (env_steps, value)")
    for i, item in enumerate(schedule):
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise ValueError(f"{name} entries must be (env_steps, value) pairs, received {item!r}")
        step, value = item
        if isinstance(step, bool) or not isinstance(step, numbers.Real) or not (
                isinstance(step, numbers.Integral) or float(step).is_integer()):
            raise ValueError(f"{name}[{i}] = {item!r}: env_steps must be an int, received"
                             f" {type(step).__name__} {step!r}")
        if isinstance(value, torch.Tensor):  # a one-element real tensor converts with float()
            real = value.numel() == 1 and not value.is_complex() and value.dtype != torch.bool
        else:
            real = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if not real:
            raise ValueError(f"{name}[{i}] = {item!r}: the value must be a real number, received"
                             f" {type(value).__name__} {value!r}")
        if not math.isfinite(float(value)):
            raise ValueError(f"{name} values must be finite, received {value!r}")
        if value < 0:
            raise ValueError(f"{name} values must be >= 0, received {value!r}")
    steps = [step for step, _ in schedule]
    if steps[0] != 0:
        raise ValueError(f"{name} must start at env_steps 0, received {steps[0]!r}")
    if any(b <= a for a, b in itertools.pairwise(steps)):
        raise ValueError(f"{name} env_steps must increase strictly, received {steps}")


def scheduled_value(schedule: Schedule, kind: ScheduleKind, env_steps: int) -> float:
    """The value of ``schedule`` after ``env_steps`` env transitions."""
    i = bisect.bisect_right([s for s, _ in schedule], env_steps) - 1
    if kind == "step" or i == len(schedule) - 1:
        return float(schedule[i][1])
    (s0, v0), (s1, v1) = schedule[i], schedule[i + 1]
    return float(v0 + (v1 - v0) * (env_steps - s0) / (s1 - s0))


class EntropyScheduler:
    """The entropy coefficient, constant or following a schedule."""

    def __init__(self, coeff: float, *, schedule: Schedule | None = None,
                 kind: ScheduleKind = "step") -> None:
        validate_schedule("entropy_coeff_schedule", schedule, kind)
        self.schedule, self.kind = schedule, kind
        self.coeff = float(schedule[0][1]) if schedule else float(coeff)

    def step(self, env_steps: int) -> float:
        """Move to ``env_steps`` and return the coefficient."""
        if self.schedule:
            self.coeff = scheduled_value(self.schedule, self.kind, env_steps)
        return self.coeff


class LRScheduler:
    """Sets every param group's learning rate from a schedule (no-op without one)."""

    def __init__(self, optimizer: torch.optim.Optimizer, *, schedule: Schedule | None = None,
                 kind: ScheduleKind = "step") -> None:
        validate_schedule("lr_schedule", schedule, kind)
        self.optimizer = optimizer
        self.schedule, self.kind = schedule, kind
        if schedule:
            self.set(float(schedule[0][1]))

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def set(self, lr: float) -> None:
        """Set every param group's learning rate (a tensor one in place)."""
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    def adapt(self, kl_div: float, desired_kl: float) -> None:
        """rsl_rl's KL-adaptive rule: divide by 1.5 where ``kl_div > 2 desired_kl``, multiply by
        1.5 where ``0 < kl_div < desired_kl / 2``, within ``[1e-5, 1e-2]``."""
        if kl_div > 2 * desired_kl:
            self.set(max(1e-5, self.lr / 1.5))
        elif 0 < kl_div < desired_kl / 2:
            self.set(min(1e-2, self.lr * 1.5))

    def step(self, env_steps: int) -> float:
        """Move to ``env_steps`` and return the learning rate."""
        if self.schedule:
            self.set(scheduled_value(self.schedule, self.kind, env_steps))
        return self.lr
