"""Timing helpers shared by the benchmarks: spreads over repeats, an algorithm's phases."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any


def spread(values: list[float]) -> dict[str, float]:
    """``{"min", "median", "max"}`` of ``values`` (repeats of one measurement)."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def collect_and_update_ms(algo: Any, iterations: int, clock: Callable[[], float]) -> tuple[float, float]:
    """Mean ``(collect, update)`` milliseconds of ``clock`` over ``iterations`` of
    ``algo.collect()`` + ``algo.step()``. With ``time.process_time`` (this process's CPU
    time) time other processes take from the core does not count: with one torch thread it
    is the wall time of an idle machine."""
    collect = update = 0.0
    for _ in range(iterations):
        start = clock()
        algo.collect()
        middle = clock()
        algo.step()
        collect += middle - start
        update += clock() - middle
    return 1000 * collect / iterations, 1000 * update / iterations
