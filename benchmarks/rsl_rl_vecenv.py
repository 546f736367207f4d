"""rl8lite and rsl_rl's ``OnPolicyRunner`` side by side on one rsl_rl ``VecEnv`` instance: mjlab's
Go1 flat velocity task on MuJoCo Warp's CPU backend (``--env mjlab``), or the reaching VecEnv of
the tests (``--env reach``, ``tests/helpers.py``: pure torch, so the trainers' own costs show).

mjlab (``pip install mjlab``: MuJoCo Warp, rsl_rl) hands its tasks to trainers as rsl_rl's
``VecEnv`` (``RslRlVecEnvWrapper``): observation groups ``"actor"`` (48) and ``"critic"`` (72,
privileged), ``extras["time_outs"]``; the reaching env's are ``"policy"`` (4) and ``"critic"``
(5). One instance is built; each side trains on it from a reset, ``--iterations`` iterations, in
turn (``--repeats`` > 1 alternates which goes first):

- ``rsl_rl``: ``OnPolicyRunner(env, cfg)`` with mjlab's PPO config for the task (the same for
  the reaching env), ``learn(1)`` per iteration, no log directory;
- ``rl8lite``: ``Algorithm(rsl_rl_env(env, init_at_random_ep_len=True), ...)`` with the same
  settings (``MJLAB_PPO`` below: 24 steps, 5 epochs of 4 minibatches, lr 1e-3 adapted by
  ``desired_kl=0.01``, 512-256-128 ELU actor and critic, the critic reading the privileged group,
  observation normalisation, clipped value loss; rsl_rl's value coefficient 1.0 is rl8lite's 2.0,
  which halves the squared error), ``collect()`` + ``step()`` per iteration.

The return is the mean of the last 100 episodes that ended, counted by a thin proxy of the
VecEnv both sides step (rsl_rl counts its own only with a log directory).

Printed per side: env steps/s per iteration (min / median / max, the first iteration left out)
and the return at every fifth iteration's env steps; the ratio rl8lite / rsl_rl of the median
env steps/s. Differences that remain: rsl_rl adapts the learning rate before each step from the
analytic Gaussian KL of the minibatch, rl8lite after it from the approximate ``(r - 1) - log r``
estimator; rsl_rl keeps a separate normaliser for the actor's and the critic's inputs, rl8lite
one per group (the same statistics).

Usage: the reaching env in the project's venv (``pip install -e '.[bench]'``); mjlab in a venv of
its own (it pins mujoco 3.11 and rsl-rl-lib 5.4.2; rsl_rl 5.5.1 replaces the latter without its
dependencies, which are the same):
    python benchmarks/rsl_rl_vecenv.py --env reach --num-envs 512 --iterations 30 --repeats 3 --json benchmarks/results/rsl_rl-reach.json
    python -m venv .mjlab-venv && .mjlab-venv/bin/pip install torch==2.13.0 mjlab==1.6.0
    .mjlab-venv/bin/pip install --no-deps rsl-rl-lib==5.5.1 -e .
    .mjlab-venv/bin/python benchmarks/rsl_rl_vecenv.py --env mjlab --num-envs 64 --iterations 25 --repeats 2 --json benchmarks/results/mjlab.json
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import io
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from provenance import write_results
from timing import spread

from rl8lite import Algorithm
from rl8lite.env import rsl_rl_env

TASK = "Mjlab-Velocity-Flat-Unitree-Go1"
MJLAB_PPO = {"horizon": 24, "num_sgd_iters": 5, "optimizer_config": {"lr": 1e-3}, "desired_kl": 0.01,
             "gamma": 0.99, "gae_lambda": 0.95, "clip_param": 0.2, "vf_clip_param": 0.2, "vf_coeff": 2.0,
             "entropy_coeff": 0.01, "max_grad_norm": 1.0, "normalize_observations": True,
             "normalize_rewards": False, "model_config": {"hiddens": [512, 256, 128], "activation": "elu"},
             "device": "cpu"}


#: mjlab's PPO config for the task as rsl_rl 5.5 reads it, written out for the reaching env
#: (``--env mjlab`` loads mjlab's own: the same values, its groups named ``actor``/``critic``).
RSL_RL_PPO = {
    "num_steps_per_env": 24, "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
    "save_interval": 10**9, "logger": "tensorboard",
    "algorithm": {"class_name": "PPO", "num_learning_epochs": 5, "num_mini_batches": 4,
                  "learning_rate": 1e-3, "schedule": "adaptive", "desired_kl": 0.01, "gamma": 0.99,
                  "lam": 0.95, "entropy_coef": 0.01, "max_grad_norm": 1.0, "value_loss_coef": 1.0,
                  "use_clipped_value_loss": True, "clip_param": 0.2,
                  "normalize_advantage_per_mini_batch": False},
    "actor": {"class_name": "MLPModel", "hidden_dims": [512, 256, 128], "activation": "elu",
              "obs_normalization": True,
              "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0, "std_type": "scalar"}},
    "critic": {"class_name": "MLPModel", "hidden_dims": [512, 256, 128], "activation": "elu",
               "obs_normalization": True},
}


def build_env(name: str, num_envs: int, seed: int) -> Any:
    if name == "reach":
        sys.path.insert(0, str(Path(__file__).parents[1]))
        from tests.helpers import ReachVecEnv

        return ReachVecEnv(num_envs, seed=seed)
    import mjlab.tasks  # noqa: F401  (registers the tasks)
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.rl import RslRlVecEnvWrapper
    from mjlab.tasks.registry import load_env_cfg

    cfg = load_env_cfg(TASK)
    cfg.scene.num_envs, cfg.seed = num_envs, seed
    return RslRlVecEnvWrapper(ManagerBasedRlEnv(cfg=cfg, device="cpu"))


class EpisodeReturns:
    """``vec_env`` as it is, recording the return of every episode that ends (both sides see it,
    so that their returns are counted alike)."""

    def __init__(self, vec_env: Any) -> None:
        object.__setattr__(self, "vec_env", vec_env)
        object.__setattr__(self, "returns", [])
        object.__setattr__(self, "running", torch.zeros(vec_env.num_envs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.vec_env, name)

    def __setattr__(self, name: str, value: Any) -> None:  # episode_length_buf, set by both sides
        setattr(self.vec_env, name, value)

    def step(self, actions: torch.Tensor) -> Any:
        obs, rewards, dones, extras = self.vec_env.step(actions)
        self.running += rewards.cpu()
        ended = dones.cpu().bool()
        self.returns.extend(self.running[ended].tolist())
        self.running[ended] = 0.0
        return obs, rewards, dones, extras

    def last_100(self) -> float:
        return statistics.fmean(self.returns[-100:]) if self.returns else float("nan")


def rsl_rl_config(name: str) -> dict[str, Any]:
    if name == "reach":
        return copy.deepcopy(RSL_RL_PPO)
    from mjlab.tasks.registry import load_rl_cfg

    cfg = dataclasses.asdict(load_rl_cfg(TASK))
    for key in ("actor", "critic"):  # as mjlab's runner: drop the options left unset
        unset = [option for option in ("cnn_cfg", "distribution_cfg") if cfg[key].get(option) is None]
        if cfg[key].get("rnn_type") is None:
            unset += ["rnn_type", "rnn_hidden_dim", "rnn_num_layers"]
        for option in unset:
            cfg[key].pop(option, None)
    return cfg


def rsl_rl_side(env: Any, iterations: int, name: str) -> list[dict[str, float]]:
    from rsl_rl.runners import OnPolicyRunner

    cfg = rsl_rl_config(name)
    runner = OnPolicyRunner(env, cfg, log_dir=None, device="cpu")
    rows, steps = [], 0
    for it in range(iterations):
        start = time.perf_counter()
        runner.learn(1, init_at_random_ep_len=it == 0)
        seconds = time.perf_counter() - start
        steps += env.num_envs * cfg["num_steps_per_env"]
        rows.append({"env_steps": steps, "seconds": seconds, "return": env.last_100()})
    return rows


def rl8lite_side(env: Any, iterations: int, seed: int) -> list[dict[str, float]]:
    minibatch = env.num_envs * MJLAB_PPO["horizon"] // 4
    algo = Algorithm(rsl_rl_env(env, init_at_random_ep_len=True), **MJLAB_PPO,
                     sgd_minibatch_size=minibatch, seed=seed)
    rows, steps = [], 0
    for _ in range(iterations):
        start = time.perf_counter()
        stats = algo.collect()
        algo.step()
        seconds = time.perf_counter() - start
        steps += int(stats["env/steps"])
        rows.append({"env_steps": steps, "seconds": seconds, "return": env.last_100()})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", choices=["mjlab", "reach"], default="mjlab")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    env = EpisodeReturns(build_env(args.env, args.num_envs, seed=0))
    build_seconds = time.perf_counter() - start
    runs: dict[str, list[list[dict[str, float]]]] = {"rsl_rl": [], "rl8lite": []}
    for repeat in range(args.repeats):
        for name in (("rsl_rl", "rl8lite") if repeat % 2 == 0 else ("rl8lite", "rsl_rl")):
            if hasattr(env, "reset"):
                with torch.inference_mode():  # both sides step it there: its buffers are inference tensors
                    env.reset()
            env.returns.clear()
            env.running.zero_()
            torch.manual_seed(repeat)
            with contextlib.redirect_stdout(io.StringIO()):  # rsl_rl prints its models
                rows = (rsl_rl_side(env, args.iterations, args.env) if name == "rsl_rl"
                        else rl8lite_side(env, args.iterations, repeat))
            runs[name].append(rows)
            rates = [r["env_steps"] / sum(x["seconds"] for x in rows[: i + 1]) for i, r in enumerate(rows)]
            print(f"repeat {repeat} {name}: {rates[-1]:.0f} env steps/s; return by env steps: "
                  + ", ".join(f"{r['env_steps']}: {r['return']:.2f}" for r in rows[4::5]), flush=True)
    per_iteration = {name: spread([args.num_envs * MJLAB_PPO["horizon"] / r["seconds"] for rows in done for r in rows[1:]])
                     for name, done in runs.items()}
    ratio = per_iteration["rl8lite"]["median"] / per_iteration["rsl_rl"]["median"]
    for name, rate in per_iteration.items():
        print(f"{name}: env steps/s per iteration min {rate['min']:.0f} median {rate['median']:.0f} max {rate['max']:.0f}")
    print(f"rl8lite / rsl_rl (median env steps/s): {ratio:.2f}; env built in {build_seconds:.0f} s")
    if args.json:
        write_results(args.json, {"task": TASK if args.env == "mjlab" else "ReachVecEnv", "num_envs": args.num_envs, "iterations": args.iterations,
                                  "build_seconds": build_seconds, "env_steps_per_s": per_iteration,
                                  "rl8lite_over_rsl_rl": ratio, "runs": runs, "rl8lite_settings": MJLAB_PPO})


if __name__ == "__main__":
    main()
