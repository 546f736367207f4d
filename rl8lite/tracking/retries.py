"""Metric writes that are retried later say so once, instead of printing MLflow's tracebacks.

A SQLite store shared by several processes (a sweep) is sometimes locked longer than
MLflow waits (``busy_timeout``, 20 s); MLflow then logs the database error with its
traceback before raising. The tracker keeps the metrics and writes them at the next
try, so for those writes the traceback is noise: it is held back, and one warning per
process names the store and the retry.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Iterator

#: MLflow's logger of database errors (``mlflow/store/db/utils.py``).
_DB_LOGGER = "mlflow.store.db.utils"
_state = threading.local()
_warned = False


class _QuietWhileRetrying(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_state, "retrying", False)


logging.getLogger(_DB_LOGGER).addFilter(_QuietWhileRetrying())


@contextlib.contextmanager
def retried_quietly() -> Iterator[None]:
    """Inside, MLflow's database-error log records of this thread are dropped (the caller retries)."""
    previous = getattr(_state, "retrying", False)
    _state.retrying = True
    try:
        yield
    finally:
        _state.retrying = previous


def warn_retry_once(tracking_uri: str, error: BaseException) -> None:
    """One ``RuntimeWarning`` per process: a write failed and will be retried."""
    global _warned
    if _warned:
        return
    _warned = True
    reason = " ".join(str(error).split())[:200]
    with contextlib.suppress(Warning):  # warnings turned into errors must not stop the retries
        warnings.warn(
            f"rl8lite: writing metrics to the MLflow store {tracking_uri!r} failed ({reason}); they are kept"
            " and retried every second (shown once per process). Many processes on one SQLite store: see"
            " the README's MLflow section for an mlflow server",
            RuntimeWarning,
            stacklevel=2,
        )
