"""What a trainer's checkpoint holds, and how a trainer is rebuilt from one.

A checkpoint is plain data (:mod:`rl8lite.runtime.checkpoint_files`): the env class by
reference (:func:`rl8lite.env.env_reference`: a dotted path, or a Gymnasium env's
options), the algorithm and the config's classes as dotted paths, the config's values,
the algorithm's state (policy, optimizer, schedules, carries, buffer, env), the
trainer's counters, the RNG states and the MLflow run to continue.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..algorithms import Algorithm, AlgorithmConfig, RecurrentAlgorithmConfig
from ..env import env_reference, import_env_class
from ..runtime import checkpoint_files as files
from ..runtime.imports import dotted_path, import_dotted_path
from ..tracking import checkpoint_dir, default_tracking_uri, download_run_artifact

if TYPE_CHECKING:
    from .trainer import Trainer

#: Config fields that hold classes (stored as dotted paths).
CLASS_FIELDS = ("model_cls", "distribution_cls", "optimizer_cls")


def config_to_plain(config: AlgorithmConfig) -> dict[str, Any]:
    """The config as plain data: classes become dotted paths, a model instance its class and config."""
    plain: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        if f.name != "model":
            plain[f.name] = files.to_plain(getattr(config, f.name), f.name)
    if config.model is not None:
        plain["model_cls"] = dotted_path(type(config.model))
        plain["model_config"] = files.to_plain(dict(getattr(config.model, "config", {}) or {}), "model.config")
    return plain


def config_from_plain(plain: dict[str, Any], *, recurrent: bool = False) -> AlgorithmConfig:
    """Inverse of :func:`config_to_plain` (imports the dotted paths)."""
    values = dict(plain)
    for name in CLASS_FIELDS:
        if isinstance(values.get(name), str):
            values[name] = import_dotted_path(values[name])
    for name in ("lr_schedule", "entropy_coeff_schedule"):
        if values.get(name) is not None:
            values[name] = [tuple(item) for item in values[name]]
    return (RecurrentAlgorithmConfig if recurrent else AlgorithmConfig)(**values)


def rebuild_problem(model: torch.nn.Module, observation_spec: Any, action_spec: Any) -> str | None:
    """Why a resume could not rebuild the model instance ``model`` from its class and
    ``config`` (what a checkpoint keeps of it), or ``None`` when it can."""
    config = dict(getattr(model, "config", {}) or {})
    call = f"{type(model).__name__}(observation_spec, action_spec, **model.config)"
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    try:
        with torch.random.fork_rng(devices=devices):  # its initialisation draws: keep the run's stream
            rebuilt = type(model)(observation_spec, action_spec, **config)
    except Exception as e:  # noqa: BLE001 - any constructor failure means no resume
        return f"{call} raises {type(e).__name__}: {e}"
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in rebuilt.state_dict().items()}
    if expected != got:
        differing = sorted(set(expected.items()) ^ set(got.items()))[:3]
        return f"{call} builds other parameters (e.g. {differing})"
    return None


def trainer_payload(trainer: Trainer) -> dict[str, Any]:
    """Everything that continues ``trainer`` exactly, as plain data.

    Raises:
        CheckpointError: A config value cannot be checkpointed.
    """
    algorithm, tracker = trainer.algorithm, trainer.tracker
    try:
        env_cls = env_reference(algorithm.env_cls)  # a dotted path, or a Gymnasium env's options
    except ImportError as e:
        raise files.CheckpointError(f"cannot checkpoint env_cls: {e}") from None
    return {
        "format": files.FORMAT,
        "version": files.VERSION,
        "env_cls": env_cls,
        "algorithm_cls": dotted_path(type(algorithm)),
        "config": config_to_plain(algorithm.hparams),
        "algorithm": files.to_plain(algorithm.state_dict(), "algorithm state"),
        "trainer": {"state": dict(trainer.state)},
        "rng": files.capture_rng(),
        "run": {
            "run_id": getattr(tracker, "run_id", None),
            "tracking_uri": getattr(tracker, "tracking_uri", None),
        },
    }


def write_trainer_checkpoint(trainer: Trainer, path: str | Path | None, keep: int | None) -> Path:
    """Write ``trainer``'s checkpoint (see :meth:`rl8lite.Trainer.save_checkpoint`)."""
    tracker = trainer.tracker
    payload = trainer_payload(trainer)
    folder = getattr(tracker, "checkpoint_dir", None)
    if path is None:
        if folder is None:
            raise ValueError("this tracker has no checkpoint folder: pass path=")
        path = Path(folder) / f"checkpoint-{trainer.state['env/steps']:012d}.pt"
    written = files.write_atomic(payload, path)
    if folder is not None:
        files.point_latest(folder, written)  # the commit point: now the run's latest
    if hasattr(tracker, "log_artifact"):
        with tempfile.TemporaryDirectory() as tmp:
            latest = Path(tmp) / "latest.pt"
            latest.symlink_to(written.resolve())
            tracker.log_artifact(latest, "checkpoints")
    if keep is not None and folder is not None and written.parent == Path(folder):
        steps = trainer.state["env/steps"]
        history = [old for n, old in files.numbered_checkpoints(folder) if n <= steps]
        for old in history[:-keep]:  # history ends with the file just written
            old.unlink(missing_ok=True)
    return written


def algorithm_from_payload(payload: dict[str, Any], path: Path, device: str | None) -> Algorithm:
    """The algorithm the checkpoint ``payload`` (read from ``path``) describes, its state loaded.

    Raises:
        CheckpointError: A class it names does not import (the message names ``path``).
    """
    try:
        env_cls = import_env_class(payload["env_cls"])
        algorithm_cls = import_dotted_path(payload.get("algorithm_cls", "rl8lite.algorithms.Algorithm"))
        recurrent = "recurrent" in payload["algorithm"] or "seq_len" in payload["config"]
        config = config_from_plain(payload["config"], recurrent=recurrent)
        if device is not None:
            config = config.replace(device=device)
    except (ImportError, TypeError) as e:
        raise files.CheckpointError(f"checkpoint {str(path)!r}: {e}") from None
    algorithm = algorithm_cls(env_cls, config)
    algorithm.load_state_dict(payload["algorithm"])
    return algorithm


def latest_checkpoint_of_run(run_id: str, tracking_uri: str | None) -> Path:
    """The checkpoint a run id resumes from (see :meth:`rl8lite.Trainer.from_checkpoint`)."""
    uri = tracking_uri or default_tracking_uri()
    folder = checkpoint_dir(uri, run_id)
    latest = files.latest_in(folder)
    if latest is not None and latest.is_file():
        return latest
    numbered = files.numbered_checkpoints(folder)
    if numbered and latest is None:  # a folder from before the record
        return numbered[-1][1]
    destination = Path(tempfile.mkdtemp(prefix="rl8lite-checkpoint-"))
    try:
        return download_run_artifact(uri, run_id, "checkpoints/latest.pt", destination)
    except Exception as e:  # noqa: BLE001 - the store's error type varies
        if numbered:  # the named file is gone and no artifact: the most env steps, as before
            return numbered[-1][1]
        raise files.CheckpointError(f"run {run_id!r} has no checkpoint: {e}") from None
