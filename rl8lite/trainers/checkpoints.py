"""A trainer's checkpoint: what it holds, how it is written, and how an algorithm is rebuilt from
one (under ``torchrun``, one per rank, resumed under the same world size)."""

from __future__ import annotations

import dataclasses
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from ..algorithms import Algorithm, AlgorithmConfig, RecurrentAlgorithmConfig
from ..env import Env, env_label, env_reference, import_env_class
from ..runtime import checkpoint_files as files
from ..runtime.distributed import process_rank
from ..runtime.imports import dotted_path, import_dotted_path
from ..tracking import Tracker, checkpoint_dir, default_tracking_uri, download_run_artifact

#: Config fields that hold classes (stored as dotted paths).
CLASS_FIELDS = ("model_cls", "distribution_cls", "optimizer_cls")


def config_to_plain(config: AlgorithmConfig) -> dict[str, Any]:
    """The config as plain data: classes as dotted paths, a model instance as class and config."""
    plain = {f.name: files.to_plain(getattr(config, f.name), f.name)
             for f in dataclasses.fields(config) if f.name != "model"}
    if config.model is not None:
        plain["model_cls"] = dotted_path(type(config.model))
        plain["model_config"] = files.to_plain(dict(getattr(config.model, "config", {}) or {}),
                                               "model.config")
    return plain


def config_from_plain(plain: dict[str, Any], *, recurrent: bool = False) -> AlgorithmConfig:
    """Inverse of :func:`config_to_plain` (imports the dotted paths)."""
    values = dict(plain)
    for name in CLASS_FIELDS:
        if isinstance(values.get(name), str):
            values[name] = import_dotted_path(values[name])
    for name in ("lr_schedule", "entropy_coeff_schedule"):
        if values.get(name) is not None:
            values[name] = list(map(tuple, values[name]))
    return (RecurrentAlgorithmConfig if recurrent else AlgorithmConfig)(**values)


def env_specs(env: Env) -> dict[str, str]:
    """What a checkpoint keeps of an env instance to recognise one like it."""
    return {"observation_spec": repr(env.observation_spec), "action_spec": repr(env.action_spec),
            "num_envs": str(env.num_envs)}


def warn_if_model_cannot_be_rebuilt(algorithm: Algorithm) -> None:
    """Warn when a resume could not rebuild the model instance from its class and ``config``."""
    model = algorithm.hparams.model
    if model is None:
        return
    spec_args = (algorithm.env.observation_spec, algorithm.env.action_spec)
    call = f"{type(model).__name__}(observation_spec, action_spec, **model.config)"
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    try:  # its initialisation draws random numbers: keep the streams
        with torch.random.fork_rng(devices=[torch.cuda.current_device()] if cuda else []):
            rebuilt = type(model)(*spec_args, **dict(getattr(model, "config", {}) or {}))
    except Exception as e:  # noqa: BLE001 - any constructor failure means no resume
        problem = f"{call} raises {type(e).__name__}: {e}"
    else:
        expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        got = {k: tuple(v.shape) for k, v in rebuilt.state_dict().items()}
        differences = sorted(set(expected.items()) ^ set(got.items()))[:3]
        problem = f"{call} builds other parameters (e.g. {differences})" if differences else None
    if problem is not None:
        warnings.warn("checkpoints of this run cannot be resumed with from_checkpoint: they keep"
                      f" the model instance as its class and config, and {problem}. Pass every"
                      " constructor argument on to Model.__init__(**config), or use model_cls="
                      " and model_config=.", RuntimeWarning, stacklevel=4)


def write(algorithm: Algorithm, counters: dict[str, int], tracker: Tracker,
          path: str | Path | None, keep: int | None) -> Path:
    """Write everything that continues training exactly, atomically; make it the run's ``latest``
    (and artifact ``checkpoints/latest.pt``) and keep the newest ``keep`` files in the folder."""
    if algorithm.env_given:
        env: Any = {"instance_of": env_label(algorithm.env_cls), **env_specs(algorithm.env)}
    else:
        try:
            env = env_reference(algorithm.env_cls)  # a dotted path, or a Gymnasium env's options
        except ImportError as e:
            raise files.CheckpointError(f"cannot checkpoint env_cls: {e}") from None
    data = {
        "format": files.FORMAT, "version": files.VERSION, "env_cls": env,
        "algorithm_cls": dotted_path(type(algorithm)), "config": config_to_plain(algorithm.hparams),
        "algorithm": files.to_plain(algorithm.state_dict(), "algorithm state"),
        "trainer": {"state": dict(counters)}, "rng": files.capture_rng(),
        "run": {"run_id": tracker.run_id, "tracking_uri": tracker.tracking_uri},
        "world_size": algorithm.ranks.world_size, "rank": algorithm.ranks.rank,
    }
    ranks, folder, steps = algorithm.ranks, tracker.checkpoint_dir, counters["env/steps"]
    if path is None:
        if folder is None:
            raise ValueError("this tracker has no checkpoint folder: pass path=")
        path = Path(folder) / f"checkpoint-{steps:012d}.pt"
    written = files.write_atomic(data, files.rank_file(path, ranks.rank))
    ranks.barrier()  # every rank's file is complete before 'latest' names the checkpoint
    if folder is not None and ranks.local_rank == 0:
        files.point_latest(folder, path)  # the commit point: now the run's latest
    if ranks.is_main:
        with tempfile.TemporaryDirectory() as tmp:
            latest = Path(tmp) / "latest.pt"
            latest.symlink_to(written.resolve())
            tracker.log_artifact(latest, "checkpoints")
    if keep is not None and folder is not None and written.parent == Path(folder):
        history = [old for n, old in files.numbered_checkpoints(folder, ranks.rank) if n <= steps]
        for old in history[:-keep]:  # history ends with the file just written
            old.unlink(missing_ok=True)
    return written


def algorithm_from_payload(data: dict[str, Any], path: Path, device: str | None,
                           env: Env | None) -> Algorithm:
    """The algorithm a checkpoint describes, its state loaded; onto ``env`` when given."""
    saved_env = data["env_cls"]
    try:
        if isinstance(saved_env, dict) and "instance_of" in saved_env:
            if env is None:
                raise files.CheckpointError(
                    f"checkpoint {str(path)!r} was written from a {saved_env['instance_of']}"
                    " instance handed to the algorithm, which a checkpoint cannot rebuild: pass"
                    " env=<an instance like it> to from_checkpoint")
            specs = env_specs(env)
            if mismatch := [f"{k}: checkpoint {v}, instance {specs[k]}"
                            for k, v in saved_env.items() if k in specs and specs[k] != v]:
                raise files.CheckpointError(
                    f"checkpoint {str(path)!r}: the env instance differs from the one it was"
                    " written from: " + "; ".join(mismatch))
        target: Any = env if env is not None else import_env_class(saved_env)
        algorithm_cls = import_dotted_path(data.get("algorithm_cls", "rl8lite.Algorithm"))
        recurrent = "recurrent" in data["algorithm"] or "seq_len" in data["config"]
        config = config_from_plain(data["config"], recurrent=recurrent)
        if env is not None or device is not None:
            config = config.replace(device=str(env.device) if env is not None else device)
    except (ImportError, TypeError) as e:
        raise files.CheckpointError(f"checkpoint {str(path)!r}: {e}") from None
    algorithm = algorithm_cls(target, config)
    algorithm.load_state_dict(data["algorithm"])
    return algorithm


def latest_checkpoint_of_run(run_id: str, tracking_uri: str | None, rank: int = 0) -> Path:
    """Rank 0's name of a run's checkpoint: ``latest``'s, else most env steps, else the artifact."""
    uri = tracking_uri or default_tracking_uri()
    latest = files.latest_in(folder := checkpoint_dir(uri, run_id))
    if latest is not None and files.rank_file(latest, rank).is_file():
        return latest
    if rank:  # its own file must be on this machine (the MLflow artifact is rank 0's)
        missing = str(files.rank_file(latest, rank) if latest is not None else folder / "latest")
        raise files.CheckpointError(f"run {run_id!r}: rank {rank} has no file {missing!r}")
    numbered = files.numbered_checkpoints(folder)
    if numbered and latest is None:
        return numbered[-1][1]
    try:
        return download_run_artifact(uri, run_id, "checkpoints/latest.pt",
                                     Path(tempfile.mkdtemp(prefix="rl8lite-")))
    except Exception as e:  # noqa: BLE001 - the store's error type varies
        if numbered:
            return numbered[-1][1]
        raise files.CheckpointError(f"run {run_id!r} has no checkpoint: {e}") from None


def read_for_resume(path_or_run_id: str | Path, tracking_uri: str | None, *,
                    custom_tracker: bool) -> tuple[dict[str, Any], Path]:
    """This rank's checkpoint (a file, a run's folder or ``latest`` record, or a run id), read."""
    rank, world_size, _ = process_rank()
    path = Path(path_or_run_id)
    if path.is_dir() or (path.name == files.LATEST and path.is_file()):
        folder = path if path.is_dir() else path.parent  # its 'latest', else the most env steps
        path = files.latest_in(folder)
        if path is None and (numbered := files.numbered_checkpoints(folder)):
            path = numbered[-1][1]
        if path is None:
            raise files.CheckpointError(
                f"{str(folder)!r} is a folder without a 'latest' record or checkpoint-*.pt files:"
                " pass a checkpoint file, the run's checkpoint folder or its run id")
    elif not path.is_file() and not str(path_or_run_id).endswith(".pt"):
        path = latest_checkpoint_of_run(str(path_or_run_id), tracking_uri, rank)
    data = files.read_checkpoint(own := files.rank_file(path, rank))
    if (saved_world := int(data.get("world_size", 1))) != world_size:
        raise files.CheckpointError(
            f"checkpoint {str(own)!r} was written by {saved_world} process(es) and is resumed"
            f" by {world_size}: each rank's env copies, buffer and random streams are saved"
            f" per rank, so resume with {saved_world} process(es)")
    if not custom_tracker and data["run"]["run_id"] is None and rank == 0:
        raise files.CheckpointError(f"checkpoint {str(own)!r} was written with a custom tracker"
                                    " and names no MLflow run: pass tracker= to from_checkpoint")
    return data, own
