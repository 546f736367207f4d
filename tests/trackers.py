"""A tracker with only the members of :class:`rl8lite.tracking.Tracker`, recording its calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class RecordingTracker:
    """The :class:`~rl8lite.tracking.Tracker` protocol and nothing else; ``calls`` records
    ``(method, arguments)`` of every call, so a test sees what a trainer asked for."""

    def __init__(self, checkpoint_dir: str | Path | None = None, *, resumed: bool = False) -> None:
        self.run_id: str | None = None
        self.tracking_uri: str | None = None
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.resumed = resumed
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def log_params(self, params: dict[str, Any]) -> None:
        self.calls.append(("log_params", {"params": params}))

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.calls.append(("log_metrics", {"metrics": metrics, "step": step}))

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self.calls.append(("log_artifact", {"path": path, "artifact_path": artifact_path}))

    def log_image(self, image: Any, *, key: str, step: int) -> None:
        self.calls.append(("log_image", {"image": image, "key": key, "step": step}))

    def log_policy(self, policy: Any, observation_spec: Any, name: str = "policy", *, step: int = 0,
                   registered_model_name: str | None = None) -> str:
        self.calls.append(("log_policy", {"name": name, "step": step,
                                          "registered_model_name": registered_model_name}))
        return f"memory://{name}"

    def flush(self) -> None:
        self.calls.append(("flush", {}))

    def end(self, status: str = "FINISHED", *, message: str | None = None) -> None:
        self.calls.append(("end", {"status": status, "message": message}))
