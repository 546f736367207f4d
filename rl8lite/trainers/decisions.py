"""How a run stops: decisions every rank takes together, the run's status, the exit a signal asks for."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, NoReturn

from ..runtime.distributed import Ranks
from ..runtime.signals import SignalRequests

if TYPE_CHECKING:
    from .trainer import Trainer


def agree(ranks: Ranks, stop: bool, requests: SignalRequests) -> tuple[bool, int | None, bool]:
    """``(stop, stop signal, checkpoint)`` as every rank will act on them (one collective;
    a stop condition or a signal on any rank counts), clearing the checkpoint request."""
    agreed_stop, signum, checkpoint = ranks.agree([stop, requests.stop or 0, requests.checkpoint])
    requests.checkpoint = False
    return bool(agreed_stop), int(signum) or None, bool(checkpoint)


def end_run(trainer: Trainer, status: str, message: str) -> None:
    """End the trainer's run with ``status``. In multi-process training, torchrun stops the
    other ranks with SIGTERM once one fails: that waits until the run has its status."""
    if not trainer.algorithm.ranks.distributed or threading.current_thread() is not threading.main_thread():
        trainer.tracker.end(status, message=message)
        return
    with SignalRequests():  # the handlers only record a signal
        trainer.tracker.end(status, message=message)


def exit_status(exc_type: type[BaseException] | None, exc: BaseException | None) -> tuple[str, str | None]:
    """The status (and message) a run ends with when a trainer's ``with`` block exits."""
    if exc_type is None:
        return "FINISHED", None
    if issubclass(exc_type, KeyboardInterrupt):
        return "KILLED", "KeyboardInterrupt"
    return "FAILED", f"{exc_type.__name__}: {exc}"


def exit_for(signum: int) -> NoReturn:
    """Leave as a stop signal asks: ``KeyboardInterrupt`` for SIGINT, else exit ``128 + signum``."""
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)
