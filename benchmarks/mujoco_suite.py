"""The MuJoCo suite with CleanRL's ``ppo_continuous_action`` settings, against CleanRL's figures.
(Named ``mujoco_suite``: a script named ``mujoco.py`` would shadow the ``mujoco`` package.)

Each run trains one task for ``--steps`` env steps (default 1M) through
``rl8lite.env.gymnasium_env`` with ``normalize_observations=True`` and CleanRL's settings:
8 sync copies x 256 steps, minibatch 64, 10 epochs, Adam lr 3e-4 annealed linearly to 0,
gamma 0.99, lambda 0.95, clip 0.2 (values clipped by 0.2 too), value weight 0.5, no entropy
bonus, grad norm 0.5, 64x64 tanh MLPs with a state-independent log-std, a Gaussian whose
actions the env clips to its bounds; rewards scaled by the std of their discounted sums.
The final return is ``episodes/return_mean``: the last 100 training episodes. The trained
policy is then evaluated (deterministic, 8 copies, 1000 steps) as trained and under
alternate physics set through config paths into the unwrapped env: the evaluations are in
the MLflow run as ``eval/<name>/...``. One torch thread per run.

Every run writes ``benchmarks/results/mujoco/<task>-seed<k>.json`` (``--out``) (curve every ~50k steps,
final return, evaluations, wall time, MLflow run id); ``--table`` prints mean +- std over the
seeds found there next to the references and writes ``benchmarks/results/mujoco.json``.

References (mean of 3 seeds at 1M steps): CleanRL's ``ppo_continuous_action`` on the v4 tasks
(HalfCheetah 1,443 +- 46, Hopper 2,383 +- 272, Walker2d 2,288 +- 572); Ant: rl-zoo's PPO
with default hyperparameters, 1,327. Ant-v5 runs with Ant-v4's observation, as the v4
references (``include_cfrc_ext_in_observation=False``: 27 elements, where v5's default adds 78
contact forces); ``--ant-contact-forces`` keeps v5's default.

Usage (``pip install -e '.[bench]'``; about 15 min per 1M-step run on one core):
    python benchmarks/mujoco_suite.py --tasks Walker2d-v5 --seeds 0 1 2
    python benchmarks/mujoco_suite.py --table
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from rl8lite import Algorithm, Trainer
from rl8lite.distributions import Normal
from rl8lite.env import gymnasium_env

sys.path.insert(0, str(Path(__file__).parent))
from provenance import write_results

RESULTS = Path(__file__).parent / "results"
TASKS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5")
REFERENCES = {"HalfCheetah-v5": (1443, 46, "CleanRL v4"), "Hopper-v5": (2383, 272, "CleanRL v4"),
              "Walker2d-v5": (2288, 572, "CleanRL v4"), "Ant-v5": (1327, None, "rl-zoo default")}


def cleanrl_config(steps: int, seed: int) -> dict[str, Any]:
    return {
        "num_envs": 8, "horizon": 256, "sgd_minibatch_size": 64, "num_sgd_iters": 10,
        "optimizer_config": {"lr": 3e-4, "eps": 1e-5},
        "lr_schedule": [(0, 3e-4), (steps, 0.0)], "lr_schedule_kind": "interp",
        "gamma": 0.99, "gae_lambda": 0.95, "clip_param": 0.2, "vf_clip_param": 0.2,
        "vf_coeff": 0.5, "entropy_coeff": 0.0, "max_grad_norm": 0.5,
        "model_config": {"hiddens": [64, 64], "activation": "tanh"}, "distribution_cls": Normal,
        "normalize_observations": True, "normalize_rewards": True, "seed": seed, "device": "cpu",
    }


def alternate_physics(task: str) -> dict[str, dict[str, Any]]:
    """Heavier torso, less friction, stronger gravity: config paths into the unwrapped env."""
    import gymnasium

    env = gymnasium.make(task)
    model = env.unwrapped.model
    torso = model.body("torso").id
    configs = {
        "heavy_torso": {f"model.body_mass[{torso}]": float(model.body_mass[torso]) * 1.5},
        "low_friction": {"model.geom_friction": (model.geom_friction * [0.5, 1, 1]).tolist()},
        "strong_gravity": {"model.opt.gravity": [0.0, 0.0, -12.0]},
    }
    env.close()
    return configs


#: Make keywords per task: the references' observations (Ant-v4 leaves out contact forces).
TASK_KWARGS = {"Ant-v5": {"include_cfrc_ext_in_observation": False}}


def train(task: str, seed: int, steps: int, experiment: str,
          make_kwargs: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(1)
    algo = Algorithm(gymnasium_env(task, seed=seed, **make_kwargs), **cleanrl_config(steps, seed))
    trainer = Trainer(algo, experiment_name=experiment, progress=False, save_policy=False)
    trainer.tracker.log_params({"benchmark/task": task, "benchmark/make_kwargs": make_kwargs})
    curve, start, stats = [], time.perf_counter(), {}
    with trainer:
        while trainer.state["env/steps"] < steps:
            stats = trainer.step()
            if trainer.state["algorithm/steps"] % 25 == 0 or trainer.state["env/steps"] >= steps:
                curve.append((trainer.state["env/steps"], stats["episodes/return_mean"]))
        wall = time.perf_counter() - start
        evaluations = {"nominal": trainer.eval(name="nominal")}
        for name, config in alternate_physics(task).items():
            evaluations[name] = trainer.eval(env_config=config, name=name)
        run_id = getattr(trainer.tracker, "run_id", None)
    returns = {name: e[f"eval/{name}/episodes/return_mean"] for name, e in evaluations.items()}
    return {"task": task, "seed": seed, "make_kwargs": make_kwargs,
            "env_steps": trainer.state["env/steps"],
            "final_return": stats["episodes/return_mean"], "wall_s": wall,
            "eval_returns": returns, "curve": curve, "mlflow_run_id": run_id}


def label(run: dict[str, Any]) -> str:
    """The run's task, and ``(v5 observation)`` where it kept v5's default observation while the
    suite now makes the references' (Ant-v5 with contact forces)."""
    task = run["task"]
    same = run.get("make_kwargs", {}) == TASK_KWARGS.get(task, {})
    return task if same else f"{task} (v5 observation)"


def table() -> None:
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((RESULTS / "mujoco").glob("*.json")):
        run = json.loads(path.read_text())
        runs.setdefault(label(run), []).append(run)
    rows = {}
    print(f"{'task':16} {'seeds':8} {'rl8lite (last 100 ep.)':>24} {'reference':>22} {'wall min':>10}")
    for name in sorted(runs, key=lambda name: (TASKS.index(name.split()[0]), name)):
        task, done = name.split()[0], runs[name]
        finals = [r["final_return"] for r in done]
        mean, std = statistics.fmean(finals), statistics.pstdev(finals) if len(finals) > 1 else math.nan
        ref, ref_std, source = REFERENCES[task]
        walls = [r["wall_s"] / 60 for r in done]
        seeds = [r["seed"] for r in done]
        ref_text = f"{ref:,} +- {ref_std} ({source})" if ref_std else f"{ref:,} ({source})"
        print(f"{name:16} {seeds!s:8} {mean:>12,.0f} +- {std:>7,.0f} {ref_text:>22} "
              f"{statistics.median(walls):>10.1f}")
        evals = {name: statistics.fmean(r["eval_returns"][name] for r in done)
                 for name in done[0]["eval_returns"]}
        print("    deterministic evaluation, mean over seeds: "
              + ", ".join(f"{name} {value:,.0f}" for name, value in evals.items()))
        rows[name] = {"seeds": seeds, "final_returns": finals, "mean": mean, "std": std,
                      "reference": {"mean": ref, "std": ref_std, "source": source},
                      "wall_min": {"min": min(walls), "median": statistics.median(walls),
                                   "max": max(walls)},
                      "eval_returns_mean": evals, "env_steps": [r["env_steps"] for r in done]}
    write_results(RESULTS / "mujoco.json", {"tasks": rows})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--experiment", default="mujoco-benchmark")
    parser.add_argument("--out", type=Path, default=RESULTS / "mujoco", help="per-run results folder")
    parser.add_argument("--table", action="store_true", help="print the table of the results found")
    parser.add_argument("--ant-contact-forces", action="store_true",
                        help="Ant-v5 with v5's default observation (contact forces included)")
    args = parser.parse_args()
    if args.table:
        return table()
    args.out.mkdir(parents=True, exist_ok=True)
    for task in args.tasks:
        for seed in args.seeds:
            kwargs = {} if args.ant_contact_forces else TASK_KWARGS.get(task, {})
            result = train(task, seed, args.steps, args.experiment, kwargs)
            variant = "" if kwargs == TASK_KWARGS.get(task, {}) else "-v5-observation"
            write_results(args.out / f"{task}{variant}-seed{seed}.json", result)
            print(f"{task} seed {seed}: {result['final_return']:,.0f} in {result['wall_s'] / 60:.1f}"
                  f" min; eval {result['eval_returns']}", flush=True)


if __name__ == "__main__":
    main()
