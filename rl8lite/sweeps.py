"""Sweeps on Optuna in MLflow (the ``sweep`` extra): a study is one parent run, each trial a child
run. A sweep file is a train config plus a ``sweep`` block whose ``params`` are dotted paths into
the train config (README.md, "Sweeps")."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import socket
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mlflow
from mlflow import MlflowClient

from .algorithms import ConfigError
from .algorithms.config import check_int
from .conditions import HitsUpperBound
from .tracking import MlflowTracker
from .tracking.mlflow_tracker import default_tracking_uri, experiment_id_for, open_client
from .trainers import Trainer
from .trainers.train_config import TrainConfig, TrainConfigError, read_mapping

KINDS = ("uniform", "log_uniform", "int", "choice")
#: Tags of a trial's run naming the process that runs it (a dead one's trial is marked FAILED).
HOST_TAG, PID_TAG = "rl8lite.sweep.host", "rl8lite.sweep.pid"


class SweepConfigError(TrainConfigError):
    """A malformed sweep file; the message names the key."""


@dataclasses.dataclass
class Sweep:
    """A sweep file: the train config (``base``) and its ``sweep`` block, every key checked."""

    base: dict[str, Any]
    metric: str
    max_steps: int
    params: dict[str, dict[str, Any]]
    direction: str = "maximize"
    trials: int = 10
    register: str | None = None
    pruner: str | None = None
    eval_env_config: dict[str, Any] | None = None
    steps_per_eval: int | None = None
    seed: int | None = None  # of the sampler (one process samples reproducibly)

    def __post_init__(self) -> None:
        if self.direction not in ("maximize", "minimize"):
            raise SweepConfigError(f"sweep.direction must be maximize or minimize, received"
                                   f" {self.direction!r}")
        for name, minimum in (("max_steps", 1), ("trials", 1), ("steps_per_eval", 1), ("seed", 0)):
            optional = name in ("steps_per_eval", "seed")
            check_int(f"sweep.{name}", getattr(self, name), minimum=minimum, optional=optional,
                      error=SweepConfigError)
        if self.pruner not in (None, "none", "median"):
            raise SweepConfigError(f"sweep.pruner must be median or none, received {self.pruner!r}")
        if self.metric.startswith("eval/") and not self.steps_per_eval:
            raise SweepConfigError(f"sweep.metric {self.metric!r} is an eval stat: set"
                                   " sweep.steps_per_eval (and eval_env_config)")
        if not isinstance(self.params, dict) or not self.params:
            raise SweepConfigError("sweep.params must map dotted paths to distributions")
        for path, spec in self.params.items():
            _check_distribution(path, spec)
        self.train_config(self.lows())  # every path lands in a valid train config

    @classmethod
    def from_file(cls, path: str | Path) -> Sweep:
        """Read a sweep file (YAML or JSON); its errors name the file."""
        data = read_mapping(Path(path))
        block, keys = data.pop("sweep", None), {f.name for f in dataclasses.fields(cls)} - {"base"}
        try:
            if not isinstance(block, dict):
                raise SweepConfigError("missing the sweep block (metric, max_steps, params, ...)")
            if unknown := sorted(set(block) - keys):
                raise SweepConfigError(f"unknown sweep key(s) {unknown}; valid: {sorted(keys)}")
            if missing := [key for key in ("metric", "max_steps", "params") if key not in block]:
                raise SweepConfigError(f"sweep.{missing[0]} is missing")
            return cls(base=data, **block)
        except (ValueError, TypeError, ImportError) as e:
            raise type(e)(f"{path}: {e}") from e

    def lows(self) -> dict[str, Any]:
        """Each param's low end (or first choice): the set-up checks' values."""
        return {path: next(iter(spec.values()))[0] for path, spec in self.params.items()}

    def train_config(self, values: dict[str, Any], seed: int | None = None) -> TrainConfig:
        """The train config with ``values`` at their paths (and ``seed``)."""
        data = copy.deepcopy(self.base)
        for path, value in values.items():
            _set_path(data, path, value)
        if seed is not None:
            data.setdefault("algorithm_config", {})["seed"] = seed
        try:
            return TrainConfig(**data)
        except TypeError as e:
            raise SweepConfigError(f"the train config: {e}") from e

    def suggest(self, trial: Any) -> dict[str, Any]:
        """A trial's params, sampled by Optuna."""
        values = {}
        for path, spec in self.params.items():
            (kind, args), = spec.items()
            if kind == "choice":
                values[path] = trial.suggest_categorical(path, args)
            elif kind == "int":
                values[path] = trial.suggest_int(path, *args)
            else:
                values[path] = trial.suggest_float(path, *args, log=kind == "log_uniform")
        return values


def _check_distribution(path: str, spec: Any) -> None:
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in KINDS:
        raise SweepConfigError(f"sweep.params[{path!r}] must be one of {{kind: args}} with kind in"
                               f" {KINDS}, received {spec!r}")
    (kind, args), = spec.items()
    if kind == "choice":
        if not isinstance(args, list) or not args:
            raise SweepConfigError(f"sweep.params[{path!r}].choice must be a non-empty list")
        return
    numbers_ok = (isinstance(args, list) and len(args) == 2
                  and all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args))
    if not numbers_ok or not all(math.isfinite(a) for a in args):
        raise SweepConfigError(f"sweep.params[{path!r}].{kind} must be [lo, hi], received {args!r}")
    lo, hi = args
    if lo > hi:
        raise SweepConfigError(f"sweep.params[{path!r}].{kind}: lo {lo} > hi {hi}")
    if kind == "log_uniform" and lo <= 0:
        raise SweepConfigError(f"sweep.params[{path!r}].log_uniform needs lo > 0, received {lo}")
    if kind == "int" and not all(isinstance(a, int) for a in args):
        raise SweepConfigError(f"sweep.params[{path!r}].int takes ints, received {args!r}")


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    if keys[0] not in ("algorithm_config", "env_cls", "recurrent"):
        raise SweepConfigError(f"sweep.params: {path!r} must start with algorithm_config")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise SweepConfigError(f"sweep.params: {path!r} goes through a value, not a mapping")
    node[keys[-1]] = value


def sweep(path: str | Path, *, trials: int | None = None, workers: int = 1,
          study_name: str | None = None, seeds: Sequence[int] | None = None,
          experiment_name: str | None = None, tracking_uri: str | None = None) -> Any:
    """Run the sweep file at ``path`` with ``workers`` processes on this machine (the same call
    on other machines, with the same tracking store, joins the study); return the Optuna study.
    A worker that dies has its running trial marked FAILED and :class:`SweepWorkerError` raised
    once the others have finished."""
    config = Sweep.from_file(path)
    check_metric(config)
    uri, name = tracking_uri or default_tracking_uri(), study_name or Path(path).stem
    study = open_study(config, name, uri, experiment_name)
    if workers == 1:
        return run_sweep(config, study_name=name, trials=trials, seeds=seeds,
                         experiment_name=experiment_name, tracking_uri=uri)
    command = [sys.executable, "-m", "rl8lite", "sweep", "--worker", "-f", str(path),
               "--study", name, *(["--trials", str(trials)] if trials else []),
               *(["--seeds", *map(str, seeds)] if seeds else []),
               *(["--experiment-name", experiment_name] if experiment_name else [])]
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    processes = [subprocess.Popen(command, env=env) for _ in range(workers)]
    dead = [p for p in processes if p.wait() != 0]
    client = open_client(uri)
    for process in dead:
        fail_dead_trials(client, study._study_id, pid=process.pid)
    if dead:
        raise SweepWorkerError(f"{len(dead)} of {workers} sweep workers exited with status"
                               f" {[p.returncode for p in dead]}; their running trials are FAILED"
                               " (run the command again to carry on)")
    study = open_study(config, name, uri, experiment_name)  # what the workers wrote
    if not study.get_trials(deepcopy=False, states=(_optuna().trial.TrialState.RUNNING,)):
        client.set_terminated(study._study_id, status="FINISHED")
    return study


class SweepWorkerError(RuntimeError):
    """A sweep worker process died (its running trial is marked FAILED)."""


def run_sweep(sweep: Sweep, *, study_name: str, trials: int | None = None,
              seeds: Sequence[int] | None = None, experiment_name: str | None = None,
              tracking_uri: str | None = None) -> Any:
    """Run trials here until the study holds ``trials`` (default: the file's) finished or running
    ones; return the Optuna study. Processes with the same store and ``study_name`` join it."""
    uri = tracking_uri or default_tracking_uri()
    optuna, client = _optuna(), open_client(uri)
    study = open_study(sweep, study_name, uri, experiment_name)
    target, failures = trials or sweep.trials, 0
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED,
              optuna.trial.TrialState.RUNNING)
    while len(study.get_trials(deepcopy=False, states=states)) < target and failures < target:
        trial = study.ask()
        study._storage.flush_all_batches()  # other workers see this trial now
        earlier = [t for t in study.get_trials(deepcopy=False, states=states)
                   if t.number < trial.number]
        if len(earlier) >= target:  # another worker took the last trial meanwhile
            client.delete_run(trial._trial_id)
            break
        try:
            value = _objective(sweep, trial, client, uri, list(seeds or [None]))
        except optuna.TrialPruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        except Exception as e:  # noqa: BLE001 - recorded with the trial; the study goes on
            failures += 1
            error = f"{type(e).__name__}: {e}"[:5000]
            client.set_tag(trial._trial_id, "rl8lite.sweep.error", error)
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, value)
            _update_best(sweep, study, trial, client)
        study._storage.flush_all_batches()
    if not study.get_trials(deepcopy=False, states=states[2:]):  # none left running
        client.set_terminated(study._study_id, status="FINISHED")
    return study


def check_metric(sweep: Sweep) -> None:
    """A :class:`SweepConfigError` unless one collect and update of the config log the metric."""
    algorithm = sweep.train_config(sweep.lows()).build_algorithm()
    try:
        collect = algorithm.collect()
        stats = {**algorithm.memory_stats(), **collect, **algorithm.step()}
    finally:
        algorithm.close()
    known = {*stats, "algorithm/collects", "algorithm/steps", "throughput/env_steps_per_s",
             *(f"eval/{key}" for key in collect)}
    if sweep.metric not in known:
        raise SweepConfigError(f"sweep.metric {sweep.metric!r} is no stat of this config; it logs"
                               f" {sorted(known)}")


def _optuna() -> Any:
    try:
        import optuna
    except ImportError as e:
        raise ImportError("sweeps need Optuna: pip install 'rl8lite[sweep]'") from e
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def open_study(sweep: Sweep, name: str, uri: str, experiment_name: str | None) -> Any:
    """The Optuna study ``name`` in the MLflow store at ``uri`` (created, or continued), with
    its search space logged on its run and the dead processes' running trials FAILED."""
    optuna, client = _optuna(), open_client(uri)
    from mlflow.optuna.storage import MlflowStorage
    env_name = sweep.train_config(sweep.lows()).env_cls.__name__
    experiment_id = experiment_id_for(client, uri, experiment_name, env_name)
    mlflow.set_tracking_uri(uri)
    storage = MlflowStorage(experiment_id=experiment_id)
    pruners = optuna.pruners
    # median: from the third trial on, after a quarter of max_steps
    pruner = (pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=sweep.max_steps // 4)
              if sweep.pruner == "median" else pruners.NopPruner())
    sampler = optuna.samplers.TPESampler(seed=sweep.seed)
    # MLflow's storage makes a new study run at every create_study: load an existing one
    if storage.get_study_id_by_name_if_exists(name) is not None:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
    else:
        study = optuna.create_study(study_name=name, storage=storage, direction=sweep.direction,
                                    pruner=pruner, sampler=sampler)
    study_run = study._study_id
    space = {f"sweep/{path}": json.dumps(spec) for path, spec in sweep.params.items()}
    space.update({"sweep/metric": sweep.metric, "sweep/direction": sweep.direction,
                  "sweep/max_steps": str(sweep.max_steps)})
    existing = client.get_run(study_run).data.params
    for key, value in space.items():
        if key in existing and existing[key] != value:
            raise SweepConfigError(f"study {name!r} was started with {key}={existing[key]};"
                                   f" this sweep file says {value}: use another --study name")
        if key not in existing:
            client.log_param(study_run, key, value)
    fail_dead_trials(client, study_run)
    client.update_run(study_run, status="RUNNING")
    return study


def _objective(sweep: Sweep, trial: Any, client: MlflowClient, uri: str,
               seeds: list[int | None]) -> float:
    values, trial_run = sweep.suggest(trial), trial._trial_id
    name = f"{trial.study.study_name}-{trial.number}"
    client.set_tag(trial_run, "mlflow.runName", name)
    client.set_tag(trial_run, HOST_TAG, socket.gethostname())
    client.set_tag(trial_run, PID_TAG, str(os.getpid()))
    if len(seeds) == 1:  # the trial's own run, RUNNING until the study has its value and state
        tracker = MlflowTracker(tracking_uri=uri, run_id=trial_run, leave_open=True)
        results = [_train(sweep, trial, sweep.train_config(values, seeds[0]), tracker)]
    else:  # a child run of the trial's per seed
        experiment = client.get_experiment(client.get_run(trial_run).info.experiment_id).name
        results = [_train(sweep, None, sweep.train_config(values, seed), MlflowTracker(
            experiment, tracking_uri=uri, run_name=f"{name}-seed{seed}",
            tags={"mlflow.parentRunId": trial_run})) for seed in seeds]
    value = statistics.fmean(v for v, _ in results)
    best = (max if sweep.direction == "maximize" else min)(results, key=lambda r: r[0])
    if best[1] is not None:
        client.set_tag(trial_run, "rl8lite.sweep.model_id", best[1])
    client.log_metric(trial_run, "sweep/objective", value)
    return value


def _train(sweep: Sweep, trial: Any, config: TrainConfig, tracker: MlflowTracker
           ) -> tuple[float, str | None]:
    """Train one config to ``max_steps``; the metric's last value and the logged policy."""
    algorithm = config.build_algorithm()
    trainer = Trainer(algorithm, progress=False, tracker=tracker)
    if tracker.resumed:  # the trial's own run: its params are the trainer's to log
        trainer.tracker.log_params(algorithm.params)
    stop = [HitsUpperBound("env/steps", sweep.max_steps)]
    if trial is not None and not sweep.metric.startswith("eval/"):
        stop.append(_pruning(trial, sweep.metric))
    try:
        trainer.run(stop_conditions=stop, steps_per_eval=sweep.steps_per_eval,
                    eval_env_config=sweep.eval_env_config)
    finally:
        algorithm.close()
    history = tracker.client.get_metric_history(tracker.run_id, sweep.metric)
    if not history:
        raise ConfigError(f"sweep.metric {sweep.metric!r} was never logged by the run; it logs"
                          f" {sorted(tracker.client.get_run(tracker.run_id).data.metrics)}")
    value = max(history, key=lambda m: (m.step, m.timestamp)).value
    if math.isnan(value):
        raise ValueError(f"sweep.metric {sweep.metric!r} is NaN at the end of the trial")
    return value, tracker.model_id


def _pruning(trial: Any, metric: str) -> Any:
    """A stop condition reporting the metric to the trial; raises ``TrialPruned`` when told to."""
    def condition(stats: dict[str, float]) -> bool:
        value = stats.get(metric, math.nan)
        if not math.isnan(value):
            trial.report(value, int(stats["env/steps"]))
            if trial.should_prune():
                raise _optuna().TrialPruned(f"{metric} = {value} at {stats['env/steps']}")
        return False
    return condition


def _update_best(sweep: Sweep, study: Any, trial: Any, client: MlflowClient) -> None:
    """Log the study's best so far on its run; move the ``champion`` alias to a better policy."""
    best, study_run = study.best_trial, study._study_id
    client.log_metric(study_run, "sweep/best_value", best.value,
                      step=len(study.get_trials(deepcopy=False)))
    client.set_tag(study_run, "rl8lite.sweep.best_trial", f"{best.number} ({best._trial_id})")
    if sweep.register is None or best.number != trial.number:
        return
    model_id = client.get_run(trial._trial_id).data.tags.get("rl8lite.sweep.model_id")
    if model_id is None:
        return
    version = mlflow.register_model(f"models:/{model_id}", sweep.register)
    client.set_registered_model_alias(sweep.register, "champion", version.version)


def fail_dead_trials(client: MlflowClient, study_run: str, pid: int | None = None) -> None:
    """Mark FAILED the RUNNING trials of this host whose process is gone (or is ``pid``)."""
    host = socket.gethostname()
    runs = client.search_runs([client.get_run(study_run).info.experiment_id], filter_string=(
        f"tags.mlflow.parentRunId = '{study_run}' and attributes.status = 'RUNNING'"
        f" and tags.`{HOST_TAG}` = '{host}'"))
    for run in runs:
        run_pid = int(run.data.tags.get(PID_TAG, "0"))
        if run_pid == pid or (pid is None and not _alive(run_pid)):
            client.set_terminated(run.info.run_id, status="FAILED")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid > 0
