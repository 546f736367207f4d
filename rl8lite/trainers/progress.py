"""The one-line progress report a trainer prints while it runs."""

from __future__ import annotations

import sys
import time
from typing import TextIO

#: Stats shown when present (and not NaN).
PROGRESS_KEYS = (
    "episodes/return_mean",
    "returns/mean",
    "losses/total",
    "monitors/kl_div",
    "throughput/env_steps_per_s",
)


class ProgressReport:
    """At most a line a second; the final report prints the last step unless it just did."""

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._last_time = 0.0
        self._last_step = -1

    def __bool__(self) -> bool:
        return self.enabled

    def report(
        self, stats: dict[str, float], state: dict[str, int], *, final: bool = False, out: TextIO | None = None
    ) -> None:
        if not self.enabled:
            return
        now, step = time.monotonic(), state["algorithm/steps"]
        if (now - self._last_time < 1.0 and not final) or step == self._last_step:
            return
        self._last_time, self._last_step = now, step
        parts = [f"step {step}", f"env steps {state['env/steps']:,}"]
        parts += [f"{key} {stats[key]:.4g}" for key in PROGRESS_KEYS if key in stats and stats[key] == stats[key]]
        print(" | ".join(parts), file=out or sys.stdout, flush=True)
