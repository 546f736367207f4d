"""rl8lite side by side with Stable-Baselines3's PPO on MuJoCo, the field's standard settings.

Both train a Gymnasium MuJoCo task (default HalfCheetah-v5 and Hopper-v5) on one torch thread
with the same work: 8 copies in a sync vector env x 256 steps per collect, 10 epochs of
minibatches of 64, Adam lr 3e-4, gamma 0.99, lambda 0.95, clip 0.2, value coefficient 0.5,
no entropy bonus, grad norm 0.5, separate 64x64 tanh actor and critic with a
state-independent log-std, Gaussian actions clipped to the bounds before the env,
advantages normalised. SB3: ``PPO("MlpPolicy", DummyVecEnv of 8, n_steps=256, batch_size=64,
n_epochs=10, ...)`` with ``policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]},
"activation_fn": nn.Tanh}``, no observation/reward normalisation on either side (SB3 would
need ``VecNormalize``); rl8lite: ``gymnasium_env(task)`` with the same settings and
``normalize_rewards=False``.

Timed: wall time of ``--steps`` env steps of training (SB3's ``learn``; rl8lite's ``collect``
+ ``step``), after one untimed warm-up collect and update per side; repeats interleaved,
the order rotating. rl8lite runs twice: ``compile=False`` (eager) and ``compile=True`` (the
update's whole minibatch step compiled; its warm-up over eager's is ``compile_seconds``: the
first compiled run in a process compiles, later ones reuse the graph). ``compile="auto"``, the
default, is eager until a run has planned 20,000 optimizer steps (62 updates here, 127k env
steps), then compiled. Ratio: SB3 time / rl8lite
time (> 1: rl8lite faster). Also: the update's milliseconds per 64-sample minibatch step, and
(``--collect-repeats``) the collect's env steps/s against Gymnasium's ``SyncVectorEnv`` of the
same 8 copies stepped with ``action_space.sample()`` alone (the collect adds the policy, the
adapter's conversions and the buffer writes), back to back in rotating order.

Usage (``pip install -e '.[bench]'``):
    python benchmarks/against_sb3.py --steps 32768 --repeats 3 --collect-repeats 9 --json benchmarks/results/sb3.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from provenance import write_results
from timing import spread

from rl8lite import Algorithm
from rl8lite.distributions import Normal
from rl8lite.env import gymnasium_env

SETTINGS = {"num_envs": 8, "horizon": 256, "minibatch": 64, "epochs": 10, "lr": 3e-4,
            "gamma": 0.99, "gae_lambda": 0.95, "clip": 0.2, "vf_coef": 0.5, "max_grad_norm": 0.5}


def rl8lite_seconds(task: str, steps: int, seed: int, compile: bool = False) -> dict[str, float]:
    s = SETTINGS
    algo = Algorithm(
        gymnasium_env(task, seed=seed), num_envs=s["num_envs"], horizon=s["horizon"],
        sgd_minibatch_size=s["minibatch"], num_sgd_iters=s["epochs"],
        optimizer_config={"lr": s["lr"]}, gamma=s["gamma"], gae_lambda=s["gae_lambda"],
        clip_param=s["clip"], vf_coeff=s["vf_coef"], max_grad_norm=s["max_grad_norm"],
        entropy_coeff=0.0, normalize_rewards=False, distribution_cls=Normal,
        model_config={"hiddens": [64, 64], "activation": "tanh"}, seed=seed, device="cpu",
        compile=compile)
    start = time.perf_counter()
    algo.collect()
    algo.step()
    warm_up = time.perf_counter() - start
    updating = 0.0
    start = time.perf_counter()
    updates = steps // (s["num_envs"] * s["horizon"])
    for _ in range(updates):
        algo.collect()
        update_start = time.perf_counter()
        algo.step()
        updating += time.perf_counter() - update_start
    seconds = time.perf_counter() - start
    algo.close()
    minibatches = updates * s["epochs"] * s["num_envs"] * s["horizon"] // s["minibatch"]
    return {"seconds": seconds, "warm_up_seconds": warm_up,
            "update_ms_per_minibatch": 1000 * updating / minibatches}


def collect_over_gymnasium(task: str, repeats: int) -> list[float]:
    """Per repeat: (Gymnasium's vector env alone) seconds / (rl8lite collect) seconds for the
    same env steps (> 1 would be faster than the bare vector env)."""
    import functools

    import gymnasium
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    s = SETTINGS
    algo = Algorithm(gymnasium_env(task, seed=0), num_envs=s["num_envs"], horizon=s["horizon"],
                     normalize_rewards=False, distribution_cls=Normal,
                     model_config={"hiddens": [64, 64], "activation": "tanh"}, seed=0,
                     device="cpu")
    vector = SyncVectorEnv([functools.partial(gymnasium.make, task)] * s["num_envs"], copy=False,
                           autoreset_mode=AutoresetMode.SAME_STEP)
    vector.reset(seed=0)
    vector.action_space.seed(0)
    algo.collect()

    def gymnasium_seconds() -> float:
        start = time.perf_counter()
        for _ in range(4 * s["horizon"]):
            vector.step(vector.action_space.sample())
        return time.perf_counter() - start

    def collect_seconds() -> float:
        start = time.perf_counter()
        for _ in range(4):
            algo.collect()
        return time.perf_counter() - start

    ratios = []
    for repeat in range(repeats):
        first, second = (gymnasium_seconds, collect_seconds)[:: 1 if repeat % 2 else -1]
        a, b = first(), second()
        bare, collect = (a, b) if first is gymnasium_seconds else (b, a)
        ratios.append(bare / collect)
    algo.close()
    vector.close()
    return ratios


def sb3_seconds(task: str, steps: int, seed: int) -> float:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    s = SETTINGS
    env = make_vec_env(task, n_envs=s["num_envs"], seed=seed)  # SB3 clips the actions itself
    model = PPO("MlpPolicy", env, n_steps=s["horizon"], batch_size=s["minibatch"],
                n_epochs=s["epochs"], learning_rate=s["lr"], gamma=s["gamma"],
                gae_lambda=s["gae_lambda"], clip_range=s["clip"], vf_coef=s["vf_coef"],
                ent_coef=0.0, max_grad_norm=s["max_grad_norm"], seed=seed, device="cpu",
                policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]},
                               "activation_fn": torch.nn.Tanh})
    model.learn(s["num_envs"] * s["horizon"])  # warm-up: one collect and update
    start = time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    seconds = time.perf_counter() - start
    env.close()
    return {"seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["HalfCheetah-v5", "Hopper-v5"])
    parser.add_argument("--steps", type=int, default=32_768)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--collect-repeats", type=int, default=0,
                        help="also time the collect against the bare vector env (first task)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {}
    sides = {"rl8lite": rl8lite_seconds,
             "rl8lite_compiled": lambda *a, **k: rl8lite_seconds(*a, **k, compile=True),
             "sb3": sb3_seconds}
    for task in args.tasks:
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        for repeat in range(args.repeats):
            names = list(sides)
            for name in names[repeat % 3:] + names[: repeat % 3]:
                runs[name].append(sides[name](task, args.steps, seed=repeat))
        times = {name: [run["seconds"] for run in done] for name, done in runs.items()}
        result: dict = {"seconds": times, "steps": args.steps, "settings": SETTINGS}
        for name in ("rl8lite", "rl8lite_compiled"):
            ratios = [sb3 / ours for sb3, ours in zip(times["sb3"], times[name])]
            result[f"sb3_over_{name}"] = spread(ratios)
            result[f"{name}_update_ms_per_minibatch"] = spread(
                [run["update_ms_per_minibatch"] for run in runs[name]])
            r = result[f"sb3_over_{name}"]
            print(f"{task} {name}: {min(times[name]):.1f}-{max(times[name]):.1f} s (SB3"
                  f" {min(times['sb3']):.1f}-{max(times['sb3']):.1f} s) for {args.steps:,} env"
                  f" steps; SB3 / {name} min {r['min']:.2f} median {r['median']:.2f} max"
                  f" {r['max']:.2f}; update {result[f'{name}_update_ms_per_minibatch']['median']:.3f}"
                  " ms per minibatch", flush=True)
        # the first compiled run of a process compiles; later ones (any task whose inputs have
        # the same shapes) reuse its graph
        result["compile_seconds"] = [run["warm_up_seconds"] - eager["warm_up_seconds"]
                                     for run, eager in zip(runs["rl8lite_compiled"], runs["rl8lite"])]
        print(f"{task}: compile (warm-up over eager's) " + ", ".join(
            f"{x:.1f}" for x in result["compile_seconds"]) + " s by repeat", flush=True)
        results[task] = result
    output: dict = {"tasks": results}
    if args.collect_repeats:
        task = args.tasks[0]
        ratios = spread(collect_over_gymnasium(task, args.collect_repeats))
        output["collect_over_gymnasium"] = {"task": task, "ratio": ratios}
        print(f"{task}: collect / bare Gymnasium vector env (env steps/s) min {ratios['min']:.2f}"
              f" median {ratios['median']:.2f} max {ratios['max']:.2f}", flush=True)
    if args.json:
        write_results(args.json, output)


if __name__ == "__main__":
    main()
