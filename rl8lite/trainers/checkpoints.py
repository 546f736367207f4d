"""What a trainer's checkpoint holds, and how a trainer is rebuilt from one.

A checkpoint is plain data (:mod:`rl8lite.runtime.checkpoint_files`): the env class by
reference (:func:`rl8lite.env.env_reference`: a dotted path, or a Gymnasium env's
options), the algorithm and the config's classes as dotted paths, the config's values,
the algorithm's state (policy, optimizer, schedules, carries, buffer, env), the
trainer's counters, the RNG states and the MLflow run to continue.

In multi-process training every rank writes a whole checkpoint of its own (its env
copies, buffer, carries and random streams differ; parameters and optimizer state
are the same on every rank): rank 0 the named file, rank ``k`` the file beside it
that :func:`~rl8lite.runtime.checkpoint_files.rank_file` names, so that each machine
holds what its ranks need. Each rank resumes from its own file, under the same
world size.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

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


def process_rank() -> tuple[int, int]:
    """``(rank, world size)`` of this process, from the process group or torchrun's variables."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1)


def warn_if_model_cannot_be_rebuilt(algorithm: Algorithm) -> None:
    """Warn when the model instance in the config cannot be rebuilt from its class and
    config, which is all a checkpoint keeps of it (its weights are still saved)."""
    model = algorithm.hparams.model
    if model is None:
        return
    problem = rebuild_problem(model, algorithm.env.observation_spec, algorithm.env.action_spec)
    if problem is not None:
        warnings.warn(
            f"checkpoints of this run cannot be resumed with from_checkpoint: they keep the model"
            f" instance as its class and config, and {problem}. Pass every constructor argument"
            " on to Model.__init__(**config), or use model_cls= and model_config=.",
            RuntimeWarning,
            stacklevel=4,
        )


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
        "world_size": algorithm.ranks.world_size,
        "rank": algorithm.ranks.rank,
    }


def write_trainer_checkpoint(trainer: Trainer, path: str | Path | None, keep: int | None) -> Path:
    """Write ``trainer``'s checkpoint (see :meth:`rl8lite.Trainer.save_checkpoint`)."""
    tracker, ranks = trainer.tracker, trainer.algorithm.ranks
    payload = trainer_payload(trainer)
    folder = getattr(tracker, "checkpoint_dir", None)
    if path is None:
        if folder is None:
            raise ValueError("this tracker has no checkpoint folder: pass path=")
        path = Path(folder) / f"checkpoint-{trainer.state['env/steps']:012d}.pt"
    written = files.write_atomic(payload, files.rank_file(path, ranks.rank))
    ranks.barrier()  # every rank's file is complete before 'latest' names the checkpoint
    if folder is not None and ranks.local_rank == 0:
        files.point_latest(folder, path)  # the commit point: now the run's latest
    if ranks.is_main and hasattr(tracker, "log_artifact"):
        with tempfile.TemporaryDirectory() as tmp:
            latest = Path(tmp) / "latest.pt"
            latest.symlink_to(written.resolve())
            tracker.log_artifact(latest, "checkpoints")
    if keep is not None and folder is not None and written.parent == Path(folder):
        steps = trainer.state["env/steps"]
        history = [old for n, old in files.numbered_checkpoints(folder, ranks.rank) if n <= steps]
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


def latest_checkpoint_of_run(run_id: str, tracking_uri: str | None, rank: int = 0) -> Path:
    """The checkpoint a run id resumes from (see :meth:`rl8lite.Trainer.from_checkpoint`);
    for ``rank > 0``, rank 0's name of it (the rank's own file is beside it)."""
    uri = tracking_uri or default_tracking_uri()
    folder = checkpoint_dir(uri, run_id)
    latest = files.latest_in(folder)
    if latest is not None and files.rank_file(latest, rank).is_file():
        return latest
    if rank:  # its own file must be on this machine (the MLflow artifact is rank 0's)
        missing = files.rank_file(latest, rank) if latest is not None else folder / "latest"
        raise files.CheckpointError(f"run {run_id!r}: rank {rank} has no checkpoint file {str(missing)!r}")
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


def latest_in_folder(folder: Path) -> Path:
    """The checkpoint a run's checkpoint folder resumes from: the one its ``latest`` record
    names, or (a folder written before that record existed) the one with the most env steps.

    Raises:
        CheckpointError: The folder holds neither (the message names it).
    """
    latest = files.latest_in(folder)
    if latest is not None:
        return latest
    numbered = files.numbered_checkpoints(folder)
    if numbered:
        return numbered[-1][1]
    raise files.CheckpointError(
        f"{str(folder)!r} is a folder without a 'latest' record or checkpoint-*.pt files:"
        " pass a checkpoint file, the run's checkpoint folder or its run id"
    )


def checkpoint_to_resume(path_or_run_id: str | Path, tracking_uri: str | None, rank: int = 0) -> Path:
    """Rank 0's checkpoint file that what a user hands :meth:`rl8lite.Trainer.from_checkpoint`
    names: a checkpoint file, a run's checkpoint folder, the ``latest`` record in it, or a run id."""
    path = Path(path_or_run_id)
    if path.is_dir():
        return latest_in_folder(path)
    if path.name == files.LATEST and path.is_file():
        return latest_in_folder(path.parent)
    if path.is_file() or str(path_or_run_id).endswith(".pt"):
        return path
    return latest_checkpoint_of_run(str(path_or_run_id), tracking_uri, rank)


def resume(
    trainer_cls: type[Trainer],
    path_or_run_id: str | Path,
    *,
    tracking_uri: str | None,
    device: str | None,
    tracker: Any,
    **trainer_options: Any,
) -> Trainer:
    """What :meth:`rl8lite.Trainer.from_checkpoint` does (see there)."""
    rank, world_size = process_rank()
    path = checkpoint_to_resume(path_or_run_id, tracking_uri, rank)
    own = files.rank_file(path, rank)  # each rank resumes from its own file
    payload = files.read_checkpoint(own)
    saved_world_size = int(payload.get("world_size", 1))
    if saved_world_size != world_size:
        raise files.CheckpointError(
            f"checkpoint {str(own)!r} was written by {saved_world_size} process(es) and is resumed by"
            f" {world_size}: each rank's env copies, buffer and random streams are saved per rank,"
            f" so resume with {saved_world_size} process(es) (torchrun --nproc_per_node/--nnodes)"
        )
    run = payload["run"]
    if tracker is None and run["run_id"] is None and rank == 0:
        raise files.CheckpointError(
            f"checkpoint {str(own)!r} was written with a custom tracker and names no MLflow run"
            " to reopen: pass tracker= to from_checkpoint"
        )
    algorithm = algorithm_from_payload(payload, own, device)
    if tracker is None and algorithm.ranks.is_main:
        from ..tracking import MlflowTracker

        tracker = MlflowTracker("", run_id=run["run_id"], tracking_uri=tracking_uri or run["tracking_uri"])
    trainer = trainer_cls(algorithm, tracker=tracker, **trainer_options)
    trainer.state = {k: int(v) for k, v in payload["trainer"]["state"].items()}
    files.restore_rng(payload["rng"])  # last: building the algorithm drew random numbers
    return trainer
