"""Turn SIGINT, SIGTERM and SIGUSR1 into requests a training loop handles between steps.

A checkpoint taken in the middle of a policy update would hold a half-updated
state, so the handlers only record the request; the loop acts on it once the
current step is done. A second SIGINT interrupts at once (KeyboardInterrupt).
"""

from __future__ import annotations

import signal
import threading
import warnings
from types import FrameType
from typing import Any


class SignalRequests:
    """Context manager installing the handlers (main thread only) and recording requests.

    Attributes:
        stop: ``signal.SIGINT`` or ``signal.SIGTERM`` once one arrived, else ``None``.
        checkpoint: ``True`` once SIGUSR1 arrived (cleared by the loop).
    """

    def __init__(self) -> None:
        self.stop: int | None = None
        self.checkpoint = False
        self._previous: dict[int, Any] = {}

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        del frame
        self.stop = signum
        # A second Ctrl-C means "now": the default handler raises KeyboardInterrupt.
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def _on_checkpoint(self, signum: int, frame: FrameType | None) -> None:
        del signum, frame
        self.checkpoint = True

    def __enter__(self) -> SignalRequests:
        if threading.current_thread() is threading.main_thread():
            handlers = {signal.SIGINT: self._on_stop, signal.SIGTERM: self._on_stop}
            if hasattr(signal, "SIGUSR1"):
                handlers[signal.SIGUSR1] = self._on_checkpoint
            for signum, handler in handlers.items():
                self._previous[signum] = signal.signal(signum, handler)
        else:  # Python delivers signals to the main thread only
            warnings.warn(
                f"training runs outside the main thread ({threading.current_thread().name}): Ctrl-C,"
                " SIGTERM and SIGUSR1 will not checkpoint it; pass checkpoint_every= to run()",
                RuntimeWarning,
                stacklevel=3,
            )
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
