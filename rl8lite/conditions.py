"""Stop conditions: callables on the latest train stats that say when to stop (rl8's). A stat
that does not exist raises :class:`UnknownStatError`; a NaN value is ignored (it never stops,
counts towards, resets or becomes the reference of a ``patience``).

Examples:
    >>> from rl8lite.conditions import And, HitsUpperBound, Plateaus
    >>> stop = And([HitsUpperBound("returns/mean", 10.0), Plateaus("returns/mean", patience=1)])
    >>> stop({"returns/mean": 11.0}), stop({"returns/mean": 11.0})
    (False, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from .runtime.imports import did_you_mean

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
        raise UnknownStatError(f"{type(condition).__name__} watches {key!r}, which is not a train"
                               f" stat{did_you_mean(key, stats)}; available stats:"
                               f" {sorted(stats)}") from None


class HitsUpperBound:
    """True once ``stats[key] >= upper_bound`` (never for a NaN value)."""

    def __init__(self, key: str, upper_bound: float, /) -> None:
        self.key, self.upper_bound = key, upper_bound

    def __call__(self, train_stats: Stats, /) -> bool:
        return read_stat(self, self.key, train_stats) >= self.upper_bound


class HitsLowerBound:
    """True once ``stats[key] <= lower_bound`` (never for a NaN value)."""

    def __init__(self, key: str, lower_bound: float, /) -> None:
        self.key, self.lower_bound = key, lower_bound

    def __call__(self, train_stats: Stats, /) -> bool:
        return read_stat(self, self.key, train_stats) <= self.lower_bound


class Plateaus:
    """True once ``stats[key]`` is within ``rtol`` of its last value ``patience`` calls in a row."""

    def __init__(self, key: str, /, *, patience: int = 5, rtol: float = 1e-3) -> None:
        if patience < 1:
            raise ValueError(f"Plateaus: patience must be >= 1, received {patience}")
        if rtol < 0:
            raise ValueError(f"Plateaus: rtol must be >= 0, received {rtol}")
        self.key, self.patience, self.rtol, self.losses = key, patience, rtol, 0
        self.old_value: float | None = None

    def __call__(self, train_stats: Stats, /) -> bool:
        value = read_stat(self, self.key, train_stats)
        if not math.isnan(value):
            old, self.old_value = self.old_value, value
            close = old is not None and abs(value - old) <= self.rtol * abs(old)
            self.losses = self.losses + 1 if close else 0
        return self.losses >= self.patience


class _StopsImproving:
    """True once ``stats[key]`` fails to beat its best value ``patience`` times in a row."""

    sign: float

    def __init__(self, key: str, /, *, patience: int = 3) -> None:
        if patience < 1:
            raise ValueError(f"{type(self).__name__}: patience must be >= 1, received {patience}")
        self.key, self.patience, self.losses = key, patience, 0
        self.best: float | None = None

    def __call__(self, train_stats: Stats, /) -> bool:
        value = self.sign * read_stat(self, self.key, train_stats)
        if not math.isnan(value):
            improved = self.best is None or value > self.best
            self.best = value if improved else self.best
            self.losses = 0 if improved else self.losses + 1
        return self.losses >= self.patience


class StopsIncreasing(_StopsImproving):
    """True once ``stats[key]`` has not reached a new maximum for ``patience`` calls."""

    sign = 1.0


class StopsDecreasing(_StopsImproving):
    """True once ``stats[key]`` has not reached a new minimum for ``patience`` calls."""

    sign = -1.0


class _Combined:
    _reduce: Callable[[list[bool]], bool]

    def __init__(self, conditions: Iterable[Condition], /) -> None:
        self.conditions = list(conditions)

    def __call__(self, train_stats: Stats, /) -> bool:
        return type(self)._reduce([condition(train_stats) for condition in self.conditions])


class And(_Combined):
    """True when every condition is true (each is called every time, to keep its state)."""

    _reduce = all


class Or(_Combined):
    """True when any condition is true (each is called every time, to keep its state)."""

    _reduce = any
