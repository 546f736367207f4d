"""Breakout-v5 learned with CleanRL's ``ppo_atari_envpool.py`` settings, and the game scores of
the policy as it learns.

Trains ``envpool_env("Breakout-v5", episodic_life=True, reward_clip=True)`` with CleanRL's
settings (8 copies x 128 steps, 4 epochs of 4 minibatches, lr 2.5e-4 annealed linearly to 0
over ``--steps``, clip 0.1, entropy 0.01, value coefficient 0.5) on one torch thread. Every
``--eval-every`` env steps the policy plays whole games (``env_config={"episodic_life": False,
"reward_clip": False}``: 5 lives, unclipped score, the figure CleanRL reports), sampling its
actions as in training, for ``--eval-collects`` collects; ``episodes/return_mean`` of those
games is printed with the training episodes' (one life, clipped rewards).

Usage (``pip install -e '.[atari]'``):
    python benchmarks/atari_learning.py --steps 1000000 --amp --json benchmarks/results/atari-learning.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from atari import POOL, RL8LITE
from provenance import write_results

from rl8lite import Algorithm
from rl8lite.env import envpool_env

WHOLE_GAMES = {"episodic_life": False, "reward_clip": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--eval-every", type=int, default=100_000)
    parser.add_argument("--eval-collects", type=int, default=8)
    parser.add_argument("--amp", action="store_true", help="enable_amp=True (bf16 update)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    per_update = RL8LITE["num_envs"] * RL8LITE["horizon"]
    algo = Algorithm(envpool_env("Breakout-v5", **POOL, seed=args.seed), **RL8LITE,
                     lr_schedule=[(0, 2.5e-4), (args.steps, 0.0)], lr_schedule_kind="interp",
                     enable_amp=args.amp, seed=args.seed)
    rows, start, steps = [], time.perf_counter(), 0
    while steps < args.steps:
        train = algo.collect()
        algo.step()
        steps += per_update
        if steps % args.eval_every < per_update or steps >= args.steps:
            games = algo.evaluate(env_config=WHOLE_GAMES, deterministic=False,
                                  collects=args.eval_collects)
            rows.append({"env_steps": steps, "seconds": time.perf_counter() - start,
                         "train_return_mean": train.get("episodes/return_mean"),
                         "game_score_mean": games.get("episodes/return_mean"),
                         "games": games.get("episodes/count")})
            print(rows[-1], flush=True)
            if args.json:  # rewritten at each evaluation: a cut-off run keeps its rows
                write_results(args.json, {"amp": args.amp, "seed": args.seed, "steps": args.steps,
                                          "settings": RL8LITE, "rows": rows})


if __name__ == "__main__":
    main()
