"""The CartPole demo (``python -m rl8lite.demo``): train until solved, evaluate under other
physics, film, print the UI command."""

from __future__ import annotations

import argparse
import os

from . import Algorithm, Trainer
from .conditions import HitsUpperBound, Or
from .examples import CartPole
from .examples.configs import CARTPOLE

EVAL_CONFIGS = {"default": {}, "heavy_pole": {"pole_mass": 0.5}, "long_pole": {"length": 1.0},
                "strong_gravity": {"gravity": 15.0}}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # as the CLI
    parser = argparse.ArgumentParser(prog="python -m rl8lite.demo", description=__doc__,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--max-steps", type=int, default=500_000, help="env steps before giving up")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--experiment-name", default="CartPole", help="MLflow experiment")
    args = parser.parse_args(argv)
    algorithm = Algorithm(CartPole, seed=args.seed, **CARTPOLE)
    with Trainer(algorithm, experiment_name=args.experiment_name, run_name="demo") as trainer:
        hp = algorithm.hparams
        print(f"Training CartPole: {hp.num_envs} envs x {hp.horizon} steps per collect")
        solved = HitsUpperBound("episodes/return_mean", 475.0)
        trainer.run(stop_conditions=[Or([solved, HitsUpperBound("env/steps", args.max_steps)])])
        results = {}
        for name, config in EVAL_CONFIGS.items():
            results[name] = stats = trainer.eval(env_config=config, name=name)
            mean = stats[f"eval/{name}/episodes/return_mean"]
            print(f"eval {name:>15}: mean episode return {mean:.1f}")
        video = trainer.record_video(name="demo")
        print(f"\nA video of the trained policy is in the run's artifacts: {video}")
        tracker = trainer.tracker
    if getattr(tracker, "tracking_uri", None) is not None:
        ui, url = tracker.ui_command, tracker.runs_url  # type: ignore[attr-defined]
        print(f"\nOpen the MLflow UI on these runs with:\n\n    {ui}\n\nthen browse to {url}")
    return results


if __name__ == "__main__":
    main()
