"""The ``rl8lite`` command: ``rl8lite train -f config.yaml`` (also ``python -m rl8lite``)."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import sysconfig
import tempfile
import traceback
from pathlib import Path

from .algorithms import ConfigError
from .algorithms.rollout import EnvOutputError, NonFiniteError
from .conditions import HitsUpperBound
from .env import EnvConfigError
from .runtime.checkpoint_files import CheckpointError
from .runtime.distributed import DistributedError
from .runtime.imports import package_version
from .specs import SpecError
from .tracking import MlflowTracker, TrackingError, save_policy_model
from .tracking.export import ExportError, export_policy
from .trainers import Trainer
from .trainers.train_config import TrainConfig, TrainConfigError

#: rl8lite's errors about its input (command, config, the env's outputs and specs): status 2.
_INPUT_ERRORS = (ConfigError, TrainConfigError, EnvConfigError, EnvOutputError, NonFiniteError,
                 SpecError, CheckpointError, TrackingError, ExportError, DistributedError)
#: Built-in errors that are one line and status 2 only where rl8lite's own code raised them.
_RL8LITE_RAISED_ERRORS = (OSError, ImportError, ValueError, NotImplementedError)

_PACKAGE_DIR = Path(__file__).resolve().parent
_STDLIB_DIRS = tuple({Path(sysconfig.get_path(key)).resolve() for key in ("stdlib", "platstdlib")})

_EPILOG = """\
config file (YAML or JSON):
  env_cls: rl8lite.examples.CartPole   # dotted path: package.module.Name or package.module:Name
  algorithm_config:                    # any AlgorithmConfig field
    num_envs: 64
    horizon: 32
    optimizer_config: {lr: 3e-3}
    seed: 0

exit status: 0 done, 2 bad command/config/env (nothing trained), 130 interrupted (Ctrl-C),
  1 an error raised by the env's own code (printed with its traceback)
"""


def _positive_int(text: str) -> int:
    with contextlib.suppress(ValueError):
        if (value := int(text)) >= 1:
            return value
    raise argparse.ArgumentTypeError(f"expected an int >= 1, received {text!r}")


def build_parser() -> argparse.ArgumentParser:
    """The ``rl8lite`` argument parser (its ``train`` subcommand documents every flag)."""
    parser = argparse.ArgumentParser(
        prog="rl8lite", description="rl8lite: a small, fast, MLflow-tracked PPO trainer.")
    parser.add_argument("--version", action="version",
                        version=f"rl8lite {package_version('rl8lite')}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    train = commands.add_parser(
        "train", help="train a policy from a config file, logging to MLflow", epilog=_EPILOG,
        description=(
            "Train a policy from a YAML or JSON train config, logging params and metrics to an\n"
            "MLflow run ($MLFLOW_TRACKING_URI, or the SQLite store in the nearest mlruns/)."),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sweep = commands.add_parser(
        "sweep", help="tune a train config with Optuna, each trial a child run in MLflow",
        description=(
            "Tune a sweep file's params (a train config plus a `sweep` block) with Optuna: the\n"
            "study is one MLflow run, each trial a child run. The same command with the same\n"
            "MLFLOW_TRACKING_URI joins the study from another machine, or continues it."),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    for command, file in ((train, "train config with env_cls and algorithm_config"),
                          (sweep, "sweep file")):
        command.add_argument("-f", "--config-file", "--file", dest="config_file", required=True,
                             type=Path, metavar="FILE", help=f"{file} (.yaml, .yml or .json)")
        command.add_argument("--experiment-name", metavar="NAME",
                             help="MLflow experiment to log under (default: the env class name)")
    train.add_argument("--run-name", metavar="NAME", help="the MLflow run's name (default: random)")
    train.add_argument("--max-env-steps", "--max-steps", dest="max_env_steps", type=_positive_int,
                       metavar="N", help="stop after the training step that reaches N env steps"
                       " (num_envs x horizon each). Default: train until Ctrl-C")
    train.add_argument("--steps-per-eval", type=_positive_int, metavar="N",
                       help="evaluate the policy every N training steps (default: never)")
    train.add_argument("--save", type=Path, metavar="DIR", help="save the trained policy (also"
                       " after Ctrl-C) as an MLflow model to DIR (new or empty)")
    train.add_argument("--no-progress", action="store_true", help="print no progress lines")
    sweep.add_argument("--trials", type=_positive_int, metavar="N",
                       help="trials the study should hold (default: the file's sweep.trials)")
    sweep.add_argument("--workers", type=_positive_int, default=1, metavar="K",
                       help="trial processes on this machine (default 1)")
    sweep.add_argument("--study", metavar="NAME", help="study name (default: the file's stem)")
    sweep.add_argument("--seeds", type=int, nargs="+", metavar="S",
                       help="train each trial's config once per seed; optimise their mean")
    sweep.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``rl8lite`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage error argparse reported
        return e.code if isinstance(e.code, int) else 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if os.getcwd() not in sys.path and "" not in sys.path:  # the console script leaves it off
        sys.path.append(os.getcwd())
    # an application's choice: MLflow's artifact progress bars drown the progress line
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        return _sweep(args) if args.command == "sweep" else _train(args)
    except KeyboardInterrupt:  # a second Ctrl-C, while building or saving
        print("rl8lite: interrupted", file=sys.stderr)
        return 130


def _error(message: object) -> int:
    print(f"rl8lite: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


def _raised_by_rl8lite(error: BaseException) -> bool:
    """Whether ``error``'s innermost frame outside the stdlib and generated code is rl8lite's."""
    for frame, _ in reversed(list(traceback.walk_tb(error.__traceback__))):
        if (filename := frame.f_code.co_filename).startswith("<"):
            continue
        path = Path(filename).resolve()
        in_stdlib = any(path.is_relative_to(d) for d in _STDLIB_DIRS) and not (
            {"site-packages", "dist-packages"} & set(path.parts))
        if not in_stdlib:
            return path.is_relative_to(_PACKAGE_DIR)
    return False


def _save_problem(path: Path) -> str | None:
    """Why ``--save path`` cannot be saved to, or ``None``; creates no folder."""
    try:
        if path.exists():
            if not path.is_dir() or any(path.iterdir()):
                return "already exists and is not an empty folder"
            folder, problem = path, ""
        else:
            folder, problem = path.absolute().parent, "cannot be created: "
            while not folder.exists() and folder != folder.parent:
                folder = folder.parent
            if not folder.is_dir():
                return f"{problem}{folder} is not a folder"
    except OSError as e:  # e.g. an ancestor this user may not search
        return f"cannot be checked: {e.strerror or e}"
    with contextlib.suppress(OSError):  # a file too: root passes os.access even in /proc
        if os.access(folder, os.W_OK | os.X_OK):
            with tempfile.TemporaryFile(dir=folder):
                return None
    return f"{problem}cannot write to the folder {folder}"


def _reported(error: Exception) -> int:
    """One line and status 2, or re-raised (status 1) where the user's own code raised it."""
    if not isinstance(error, _INPUT_ERRORS) and not _raised_by_rl8lite(error):
        raise error
    return _error(error)


def _train(args: argparse.Namespace) -> int:
    if args.save is not None and (problem := _save_problem(args.save)) is not None:
        return _error(f"--save {args.save}: {problem}")
    try:
        algorithm = TrainConfig.from_file(args.config_file).build_algorithm()
        if args.save is not None:
            with tempfile.TemporaryDirectory() as tmp:  # a model torch.export refuses fails now
                export_policy(algorithm.policy, algorithm.env.observation_spec, tmp)
        algorithm.validate()
        trainer = Trainer(algorithm, experiment_name=args.experiment_name,
                          run_name=args.run_name, progress=not args.no_progress,
                          tags={"rl8lite.config_file": str(args.config_file.resolve())})
    except (*_INPUT_ERRORS, *_RL8LITE_RAISED_ERRORS) as e:
        return _reported(e)

    hp, ranks, where = algorithm.hparams, algorithm.ranks, algorithm.hparams.device
    if ranks.distributed:
        where = f"{ranks.world_size} processes ({hp.device.split(':')[0]}), {hp.num_envs} envs each"
    until = f"{args.max_env_steps:,} env steps" if args.max_env_steps else "Ctrl-C"
    if ranks.is_main:
        print(f"rl8lite: training {type(algorithm.env).__name__} ({hp.num_envs} envs x"
              f" {hp.horizon} steps per training step) on {where} until {until}", flush=True)
    if isinstance(tracker := trainer.tracker, MlflowTracker):
        print(f"rl8lite: MLflow run {tracker.run_id}; open the UI with: {tracker.ui_command}")
        print(f"rl8lite: then browse to {tracker.runs_url}")
    stop = [HitsUpperBound("env/steps", args.max_env_steps)] if args.max_env_steps else []
    status = 0
    try:
        try:
            stats = trainer.run(steps_per_eval=args.steps_per_eval, stop_conditions=stop)
            key = "episodes/return_mean"  # the curve users look for, else the horizon's return
            if math.isnan(stats.get(key, math.nan)):
                key = "returns/mean"
            if ranks.is_main:
                print(f"rl8lite: finished after {trainer.state['env/steps']:,} env steps;"
                      f" {key} {stats[key]:.4g}", flush=True)
        except KeyboardInterrupt:  # the trainer has ended its run (KILLED)
            if ranks.is_main:
                print(f"rl8lite: interrupted after {trainer.state['env/steps']:,} env steps",
                      file=sys.stderr, flush=True)
            status = 130
        if args.save is not None and ranks.is_main:
            save_policy_model(algorithm.policy, algorithm.env.observation_spec, args.save)
            print(f"rl8lite: saved the policy to {args.save}"
                  " (load it with mlflow.pyfunc.load_model)")
    finally:
        algorithm.close()  # e.g. a Gymnasium env's worker processes
    return status


def _sweep(args: argparse.Namespace) -> int:
    from . import sweeps
    options = {"trials": args.trials, "seeds": args.seeds, "experiment_name": args.experiment_name}
    try:
        if args.worker:  # one of the processes `--workers K` started: the file is checked
            sweeps.run_sweep(sweeps.Sweep.from_file(args.config_file),
                             study_name=args.study or args.config_file.stem, **options)
            return 0
        study = sweeps.sweep(args.config_file, workers=args.workers, study_name=args.study,
                             **options)
    except sweeps.SweepWorkerError as e:
        print(f"rl8lite: {e}", file=sys.stderr)
        return 1
    except (*_INPUT_ERRORS, *_RL8LITE_RAISED_ERRORS) as e:
        return _reported(e)
    states = [trial.state.name for trial in study.get_trials(deepcopy=False)]
    counts = ", ".join(f"{states.count(s)} {s.lower()}" for s in sorted(set(states)))
    print(f"rl8lite: study {study.study_name!r}: {len(states)} trials ({counts})")
    if any(s == "COMPLETE" for s in states):
        print(f"rl8lite: best {study.best_value:.6g} with {study.best_params}")
    return 0

