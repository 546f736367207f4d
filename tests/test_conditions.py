"""Stop conditions, And/Or, and the unknown-key error."""

from __future__ import annotations

import pytest

from rl8lite.conditions import (
    And,
    HitsLowerBound,
    HitsUpperBound,
    Or,
    Plateaus,
    StopsDecreasing,
    StopsIncreasing,
    UnknownStatError,
)


def test_bounds() -> None:
    assert not HitsUpperBound("x", 1.0)({"x": 0.5})
    assert HitsUpperBound("x", 1.0)({"x": 1.0})
    assert HitsLowerBound("x", 0.0)({"x": -0.1})
    assert not HitsLowerBound("x", 0.0)({"x": 0.1})


def test_plateaus_counts_consecutive_small_changes() -> None:
    cond = Plateaus("x", patience=2, rtol=0.1)
    results = [cond({"x": v}) for v in (10.0, 10.5, 20.0, 20.5, 20.6)]
    assert results == [False, False, False, False, True]


def test_stops_increasing_and_decreasing() -> None:
    up = StopsIncreasing("x", patience=2)
    assert [up({"x": v}) for v in (1, 2, 2, 1.5)] == [False, False, False, True]
    down = StopsDecreasing("x", patience=2)
    assert [down({"x": v}) for v in (3, 2, 1, 4, 1)] == [False, False, False, False, True]


def test_and_or_call_every_condition() -> None:
    plateau = Plateaus("x", patience=1, rtol=0.0)
    both = And([HitsUpperBound("x", 5.0), plateau])
    assert [both({"x": v}) for v in (6.0, 6.0)] == [False, True]
    either = Or([HitsUpperBound("x", 5.0), HitsLowerBound("x", -5.0)])
    assert either({"x": -6.0}) and either({"x": 6.0}) and not either({"x": 0.0})
    stateful = Plateaus("y", patience=1, rtol=0.0)
    any_of = Or([HitsUpperBound("x", 0.0), stateful])
    any_of({"x": 1.0, "y": 1.0})
    assert stateful.old_value == 1.0  # evaluated even though the first was already true


def test_unknown_key_names_the_key_and_lists_the_stats() -> None:
    with pytest.raises(UnknownStatError, match=r"HitsUpperBound watches 'returns/mea'.*'returns/mean'"):
        HitsUpperBound("returns/mea", 1.0)({"returns/mean": 0.0})
    with pytest.raises(KeyError):
        And([Plateaus("nope")])({"x": 1.0})


def test_bad_condition_arguments() -> None:
    with pytest.raises(ValueError, match="patience must be >= 1"):
        Plateaus("x", patience=0)
    with pytest.raises(ValueError, match="patience must be >= 1"):
        StopsIncreasing("x", patience=0)
