"""The tracker protocol a :class:`~rl8lite.Trainer` logs through, and a tracker that logs nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

Policy = Any  # the policy (rl8lite.policies.Policy)
from ..specs import Spec


class TrackingError(RuntimeError):
    """The tracking store cannot be reached or written; the message names it."""


class Tracker(Protocol):
    """What a :class:`~rl8lite.Trainer` needs from an experiment tracker."""

    def log_params(self, params: dict[str, Any]) -> None: ...

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...

    def log_policy(self, policy: Policy, observation_spec: Spec, name: str) -> str: ...

    def flush(self) -> None: ...

    def end(self, status: str = "FINISHED", *, message: str | None = None) -> None: ...


class NullTracker:
    """Logs nothing: the tracker of every rank but rank 0 in multi-process training.

    Args:
        checkpoint_dir: The run's checkpoint folder (each rank writes its own file there).
    """

    resumed = True  # never logs params

    def __init__(self, checkpoint_dir: str | Path | None = None) -> None:
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None

    def log_params(self, params: dict[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass

    def log_policy(self, policy: Policy, observation_spec: Spec, name: str = "policy") -> str:
        return ""

    def flush(self) -> None:
        pass

    def end(self, status: str = "FINISHED", *, message: str | None = None) -> None:
        pass


def mlflow_version() -> str:
    """The installed mlflow's version, read from its metadata (without importing mlflow)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mlflow")
    except PackageNotFoundError:
        return "not installed"
