"""Genesis's Go2 walking task (``rl8lite.examples.Go2``) on Genesis's CPU backend: scene build
time, env steps/s alone and in rl8lite training, and a reward curve.

- build: the first ``Go2`` of the process (Genesis compiles its kernels, or loads them from its
  on-disk cache; ``--cold`` points the cache at an empty folder) and a second one (kernels in
  memory);
- env alone: ``env.step`` with Gaussian actions (std 0.5), no policy (min / median / max over
  ``--repeats``, as the training figures);
- training: ``Algorithm.collect()`` alone, and ``collect()`` + ``step()`` (a full iteration),
  with Genesis's rsl_rl settings (``rl8lite.examples.configs.GO2``: 24 steps per collect, 5
  epochs of 4 minibatches, 512-256-128 ELU actor and critic);
- reward curve (``--iterations``, or until ``--budget-s``): per iteration, the per-step reward
  mean, the tracking term of the commanded 0.5 m/s (0.02 per step at best) and the completed
  episodes' mean return and length.

Usage:
    python benchmarks/genesis_go2.py --envs 64 256 1024 --curve-envs 256 --iterations 200 \\
        --cold --json benchmarks/results/genesis-go2.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from provenance import write_results
from timing import spread

HORIZON = 24


def build(num_envs: int) -> tuple[Any, float]:
    from rl8lite.examples import Go2

    start = time.perf_counter()
    env = Go2(num_envs, HORIZON)
    return env, time.perf_counter() - start


def algorithm(env: Any, hiddens: list[int]) -> Any:
    from rl8lite import Algorithm
    from rl8lite.examples.configs import GO2

    return Algorithm(env, seed=0, **{**GO2, "sgd_minibatch_size": env.num_envs * HORIZON // 4,
                                     "model_config": {"hiddens": hiddens, "activation": "elu"}})


def env_steps_per_s(env: Any, steps: int) -> float:
    env.reset()
    actions = [0.5 * torch.randn(env.num_envs, 12) for _ in range(8)]
    for i in range(10):
        env.step(actions[i % 8])
    start = time.perf_counter()
    for i in range(steps):
        env.step(actions[i % 8])
    return env.num_envs * steps / (time.perf_counter() - start)


def training_steps_per_s(env: Any, hiddens: list[int], iterations: int) -> dict[str, float]:
    algo = algorithm(env, hiddens)
    for _ in range(2):
        algo.collect()
        algo.step()
    collect = full = 0.0
    for _ in range(iterations):
        start = time.perf_counter()
        algo.collect()
        middle = time.perf_counter()
        algo.step()
        collect, full = collect + middle - start, full + time.perf_counter() - start
    steps = env.num_envs * HORIZON * iterations
    return {"collect_env_steps_per_s": steps / collect, "full_env_steps_per_s": steps / full}


def reward_curve(env: Any, hiddens: list[int], iterations: int, budget_s: float
                 ) -> list[dict[str, float]]:
    algo, start, curve = algorithm(env, hiddens), time.perf_counter(), []
    for i in range(iterations):
        if time.perf_counter() - start > budget_s:
            break
        stats = algo.collect()
        terms = env.reward_terms()
        algo.step()
        curve.append({
            "iteration": i + 1, "env_steps": env.num_envs * HORIZON * (i + 1),
            "seconds": round(time.perf_counter() - start, 2),
            "reward_mean": stats["rewards/mean"], "tracking_lin_vel": terms["tracking_lin_vel"],
            "episode_return_mean": stats.get("episodes/return_mean"),
            "episode_length_mean": stats.get("episodes/length_mean"),
            "load_average_1min": os.getloadavg()[0],
        })
        print({k: round(v, 4) if isinstance(v, float) else v for k, v in curve[-1].items()},
              flush=True)
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--env-steps", type=int, default=200, help="steps timed per env size")
    parser.add_argument("--train-iterations", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="of each timing (min/median/max)")
    parser.add_argument("--curve-envs", type=int, default=256)
    parser.add_argument("--iterations", type=int, default=150, help="reward curve length")
    parser.add_argument("--budget-s", type=float, default=600.0, help="the curve's time limit")
    parser.add_argument("--hiddens", type=int, nargs="+", default=[512, 256, 128])
    parser.add_argument("--cold", action="store_true", help="empty Genesis kernel cache")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.cold:  # Genesis and its kernel compiler keep their caches under XDG_CACHE_HOME
        os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="genesis-cache-")
    import genesis

    results: dict[str, Any] = {"genesis": genesis.__version__, "cold_cache": args.cold,
                               "hiddens": args.hiddens, "horizon": HORIZON, "sizes": []}
    for i, num_envs in enumerate(args.envs):
        env, seconds = build(num_envs)
        runs = [{"env_steps_per_s": env_steps_per_s(env, args.env_steps),
                 **training_steps_per_s(env, args.hiddens, args.train_iterations)}
                for _ in range(args.repeats)]
        row = {"envs": num_envs, "build_s": round(seconds, 2), "first_build": i == 0,
               **{key: spread([run[key] for run in runs]) for key in runs[0]},
               "load_average_1min": os.getloadavg()[0]}
        print(row, flush=True)
        results["sizes"].append(row)
        env.close()
    if args.iterations:
        env, _ = build(args.curve_envs)
        results["curve"] = {"envs": args.curve_envs,
                            "budget_s": args.budget_s,
                            "points": reward_curve(env, args.hiddens, args.iterations,
                                                   args.budget_s)}
        env.close()
    if args.json:
        write_results(args.json, results)


if __name__ == "__main__":
    main()
