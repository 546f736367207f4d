"""Stop conditions: callables on the latest train stats that say when to stop (rl8's).

A condition is any ``Callable[[dict[str, float]], bool]``. A condition that
watches a stat the trainer does not produce raises :class:`UnknownStatError`
naming the key and listing the stats that exist.

A NaN value carries no information (``episodes/return_mean`` is NaN for a
collect in which no episode ended): every condition here ignores it, so it never
stops training, never counts towards a ``patience``, never resets one and never
becomes the value compared against; the decision is made only from the
non-NaN values seen. Infinities are ordinary values and compare as such.

Examples:
    >>> from rl8lite.conditions import And, HitsUpperBound, Plateaus
    >>> stop = And([HitsUpperBound("returns/mean", 10.0), Plateaus("returns/mean", patience=1)])
    >>> stop({"returns/mean": 11.0}), stop({"returns/mean": 11.0})
    (False, True)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Protocol

Stats = Mapping[str, float]


class UnknownStatError(KeyError):
    """A stop condition names a stat that does not exist."""

    def __str__(self) -> str:
        return str(self.args[0])


class Condition(Protocol):
    """Anything callable on the train stats that returns ``True`` to stop."""

    def __call__(self, train_stats: Stats, /) -> bool: ...


def read_stat(condition: object, key: str, stats: Stats) -> float:
    """``stats[key]``, or an :class:`UnknownStatError` naming the condition and the key."""
    try:
        return stats[key]
    except KeyError:
        raise UnknownStatError(
            f"{type(condition).__name__} watches {key!r}, which is not a train stat;"
            f" available stats: {sorted(stats)}"
        ) from None


class HitsUpperBound:
    """True once ``stats[key] >= upper_bound`` (never for a NaN value)."""

    def __init__(self, key: str, upper_bound: float, /) -> None:
        self.key = key
        self.upper_bound = upper_bound

    def __call__(self, train_stats: Stats, /) -> bool:
        return read_stat(self, self.key, train_stats) >= self.upper_bound


class HitsLowerBound:
    """True once ``stats[key] <= lower_bound`` (never for a NaN value)."""

    def __init__(self, key: str, lower_bound: float, /) -> None:
        self.key = key
        self.lower_bound = lower_bound

    def __call__(self, train_stats: Stats, /) -> bool:
        return read_stat(self, self.key, train_stats) <= self.lower_bound


class Plateaus:
    """True once ``stats[key]`` stays within ``rtol`` of the previous value ``patience`` times in a row.

    A NaN value is skipped: it neither extends nor breaks the run, and the next
    value is compared with the last non-NaN one.
    """

    def __init__(self, key: str, /, *, patience: int = 5, rtol: float = 1e-3) -> None:
        if patience < 1:
            raise ValueError(f"Plateaus: patience must be >= 1, received {patience}")
        if rtol < 0:
            raise ValueError(f"Plateaus: rtol must be >= 0, received {rtol}")
        self.key = key
        self.patience = patience
        self.rtol = rtol
        self.losses = 0
        self.old_value: float | None = None

    def __call__(self, train_stats: Stats, /) -> bool:
        value = read_stat(self, self.key, train_stats)
        if math.isnan(value):
            return self.losses >= self.patience
        if self.old_value is not None and abs(value - self.old_value) <= self.rtol * abs(self.old_value):
            self.losses += 1
        else:
            self.losses = 0
        self.old_value = value
        return self.losses >= self.patience


class _StopsImproving:
    """True once ``stats[key]`` fails to beat its best value ``patience`` times in a row.

    A NaN value is skipped: it is not a miss, does not reset the count and never
    becomes the best value, so only NaN values never stop.
    """

    sign: float

    def __init__(self, key: str, /, *, patience: int = 3) -> None:
        if patience < 1:
            raise ValueError(f"{type(self).__name__}: patience must be >= 1, received {patience}")
        self.key = key
        self.patience = patience
        self.losses = 0
        self.best: float | None = None

    def __call__(self, train_stats: Stats, /) -> bool:
        value = self.sign * read_stat(self, self.key, train_stats)
        if math.isnan(value):
            return self.losses >= self.patience
        if self.best is None or value > self.best:
            self.best = value
            self.losses = 0
        else:
            self.losses += 1
        return self.losses >= self.patience


class StopsIncreasing(_StopsImproving):
    """True once ``stats[key]`` has not reached a new maximum for ``patience`` calls (NaNs skipped)."""

    sign = 1.0


class StopsDecreasing(_StopsImproving):
    """True once ``stats[key]`` has not reached a new minimum for ``patience`` calls (NaNs skipped)."""

    sign = -1.0


class And:
    """True when every condition is true (each is called every time, to keep its state)."""

    def __init__(self, conditions: Iterable[Condition], /) -> None:
        self.conditions = list(conditions)

    def __call__(self, train_stats: Stats, /) -> bool:
        return all([condition(train_stats) for condition in self.conditions])


class Or:
    """True when any condition is true (each is called every time, to keep its state)."""

    def __init__(self, conditions: Iterable[Condition], /) -> None:
        self.conditions = list(conditions)

    def __call__(self, train_stats: Stats, /) -> bool:
        return any([condition(train_stats) for condition in self.conditions])
