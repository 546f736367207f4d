"""SIGINT, SIGTERM and SIGUSR1 as requests a training loop handles between steps (a checkpoint
mid-update would hold a half-updated state). A second SIGINT interrupts at once."""

from __future__ import annotations

import signal
import threading
import warnings
from types import FrameType
from typing import Any

from typing_extensions import Self


class SignalRequests:
    """Context manager installing the handlers (main thread only) and recording requests:
    ``stop`` (``SIGINT`` or ``SIGTERM`` once one arrived) and ``checkpoint`` (SIGUSR1)."""

    def __init__(self) -> None:
        self.stop: int | None = None
        self.checkpoint = False
        self._previous: dict[int, Any] = {}

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop = signum
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C: now

    def _on_checkpoint(self, signum: int, frame: FrameType | None) -> None:
        self.checkpoint = True

    def __enter__(self) -> Self:
        if threading.current_thread() is not threading.main_thread():
            warnings.warn(f"training runs outside the main thread"  # Python signals only it
                          f" ({threading.current_thread().name}): Ctrl-C, SIGTERM and SIGUSR1 will"
                          " not checkpoint it; pass checkpoint_every= to run()", RuntimeWarning,
                          stacklevel=3)
            return self
        handlers = {signal.SIGINT: self._on_stop, signal.SIGTERM: self._on_stop}
        if hasattr(signal, "SIGUSR1"):
            handlers[signal.SIGUSR1] = self._on_checkpoint
        for signum, handler in handlers.items():
            self._previous[signum] = signal.signal(signum, handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
