"""Stop conditions, And/Or, and the unknown-key error."""

from __future__ import annotations

import math

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
    stats = {"episodes/return_mean": 0.0, "losses/total": 1.0}
    with pytest.raises(UnknownStatError, match=r"stat \(did you mean 'episodes/return_mean'\?\)"):
        HitsUpperBound("episode/return_mean", 1.0)(stats)
    with pytest.raises(KeyError):
        And([Plateaus("nope")])({"x": 1.0})


def test_bad_condition_arguments() -> None:
    with pytest.raises(ValueError, match="patience must be >= 1"):
        Plateaus("x", patience=0)
    with pytest.raises(ValueError, match="patience must be >= 1"):
        StopsIncreasing("x", patience=0)


NAN = float("nan")


@pytest.mark.parametrize("cls, values", [(StopsIncreasing, (NAN, 10, 20, 30)), (StopsDecreasing, (NAN, -10, -20, -30))])
def test_stops_improving_skips_a_nan_first_value(cls, values) -> None:
    cond = cls("x", patience=2)
    assert [cond({"x": v}) for v in values] == [False, False, False, False]
    assert cond.best == 30 and cond.losses == 0  # the best is sign * value: 30 for both


@pytest.mark.parametrize("cls, sign", [(StopsIncreasing, 1.0), (StopsDecreasing, -1.0)])
def test_stops_improving_skips_nan_in_the_middle(cls, sign) -> None:
    cond = cls("x", patience=2)
    # NaNs neither count as "no improvement" nor reset the count of a real one
    values = (1, 2, NAN, NAN, NAN, 3, 2, NAN, 2.5, NAN)
    expected = [False, False, False, False, False, False, False, False, True, True]
    assert [cond({"x": v if math.isnan(v) else sign * v}) for v in values] == expected


def test_stops_improving_never_stops_on_nan_only() -> None:
    up, down = StopsIncreasing("x", patience=1), StopsDecreasing("x", patience=1)
    assert not any(up({"x": NAN}) or down({"x": NAN}) for _ in range(10))
    assert up.best is None and down.best is None


def test_plateaus_skips_nan() -> None:
    cond = Plateaus("x", patience=2, rtol=0.1)
    values = (NAN, 10.0, NAN, 10.5, NAN, NAN, 10.6)
    assert [cond({"x": v}) for v in values] == [False] * 6 + [True]
    never = Plateaus("x", patience=1, rtol=0.0)
    assert not any(never({"x": NAN}) for _ in range(10))
    assert never.old_value is None


def test_bounds_are_never_hit_by_nan() -> None:
    assert not HitsUpperBound("x", 1.0)({"x": NAN})
    assert not HitsLowerBound("x", 1.0)({"x": NAN})
    assert not Or([HitsUpperBound("x", 1.0), HitsLowerBound("x", 1.0)])({"x": NAN})
