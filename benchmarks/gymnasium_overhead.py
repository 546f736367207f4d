"""What ``gymnasium_env`` costs: env steps/s of a collect against stepping the same vector env.

For each env (Gymnasium's ``CartPole-v1`` with ``CARTPOLE``, ``Acrobot-v1`` with
``ACROBOT``: their ``horizon``, and their ``num_envs`` unless ``--num-envs`` says
otherwise) and vectorization mode, every repeat times, back to back (in rotating order),
the same number of env steps (``collects x num_envs x horizon``) three ways:

- **gymnasium**: Gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv`` made as the adapter
  makes it (same-step autoreset, observations not copied), stepped with
  ``action_space.sample()`` actions: the upper bound;
- **collect**: ``Algorithm(gymnasium_env(env_id, vectorization_mode=mode), seed=0,
  **CONFIG).collect()`` after a warm-up collect: the env steps plus everything PPO's
  rollout does per step (the policy's forward pass and sampling, the buffer writes) and
  per collect (statistics, the values pass, an env reset every ``horizons_per_env_reset``
  collects), plus the adapter's conversions;
- **adapter step**: ``env.step(env.action_spec.rand([num_envs]))`` on a second adapter
  env: the adapter alone (its per-copy wrapper, the action, observation, reward and
  final-observation conversions, the TensorDict), without PPO;
- **loop**: a framework-free PPO rollout written in this script on a third vector env
  made the same way: per step the actor's forward pass (a copy of the algorithm's
  actor), a Gumbel-max sample and its log-probability, and writes of the observation,
  action, log-probability, reward, terminated/truncated flags and final observations
  into preallocated tensors; per collect the critic over every observation and over the
  final observations of truncated episodes. It is the least a PPO rollout does, without
  rl8lite (no statistics, no checks).

The ratios to gymnasium (env steps/s) and collect / loop are taken within each repeat;
the script prints min/median/max over the repeats. The goal is collect / gymnasium
>= 0.9; loop / gymnasium bounds what any PPO rollout on this env can reach, and
collect / loop is what rl8lite costs over writing that rollout by hand. One torch thread.

``--clock cpu`` times with this process's CPU time instead of the wall clock: on a
machine other jobs share, it leaves out the time spent waiting for a core. It sees this
process only, so it is for ``--modes sync`` (async copies step in worker processes).

Usage:
    python benchmarks/gymnasium_overhead.py --repeats 5 --json benchmarks/results/gymnasium-overhead.json
    python benchmarks/gymnasium_overhead.py --modes sync --clock cpu --json benchmarks/results/gymnasium-overhead-sync-cpu.json
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from rl8lite import Algorithm
from rl8lite.env import gymnasium_env
from rl8lite.examples.configs import ACROBOT, CARTPOLE

sys.path.insert(0, str(Path(__file__).parent))
from provenance import write_results
from timing import spread

CASES = {"CartPole-v1": CARTPOLE, "Acrobot-v1": ACROBOT}


#: The clock timings use: the wall clock, or this process's CPU time (``--clock cpu``).
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


def gymnasium_steps_per_s(vector_env: Any, steps: int) -> float:
    """Env steps/s of ``steps // num_envs`` vector steps with random actions."""
    start = clock()
    for _ in range(steps // vector_env.num_envs):
        vector_env.step(vector_env.action_space.sample())
    return steps / (clock() - start)


def adapter_steps_per_s(env: Any, steps: int) -> float:
    """Env steps/s of ``steps // num_envs`` adapter steps with random actions (as a collect runs them)."""
    start = clock()
    with torch.inference_mode():
        for _ in range(steps // env.num_envs):
            env.step(env.action_spec.rand([env.num_envs]))
    return steps / (clock() - start)


class HandWrittenRollout:
    """The least a PPO rollout does on ``vector_env``, written without rl8lite (see ``loop``)."""

    def __init__(self, vector_env: Any, actor: torch.nn.Module, critic: torch.nn.Module, horizon: int) -> None:
        n, size = vector_env.num_envs, vector_env.single_observation_space.shape[0]
        self.env, self.actor, self.critic, self.horizon = vector_env, actor, critic, horizon
        self.obs = torch.zeros(n, horizon + 1, size)
        self.final_obs = torch.zeros(n, horizon, size)
        self.actions = torch.zeros(n, horizon, dtype=torch.long)
        self.logp, self.rewards = torch.zeros(n, horizon), torch.zeros(n, horizon)
        self.values, self.final_values = torch.zeros(n, horizon + 1), torch.zeros(n, horizon)
        self.terminated = torch.zeros(n, horizon, dtype=torch.bool)
        self.truncated = torch.zeros(n, horizon, dtype=torch.bool)
        self.obs[:, 0] = torch.from_numpy(vector_env.reset(seed=1)[0])

    def collect(self) -> None:
        with torch.inference_mode():
            obs = self.obs[:, 0] = self.obs[:, self.horizon]
            for t in range(self.horizon):
                log_probs = self.actor(obs).log_softmax(-1)
                gumbel = torch.rand_like(log_probs).clamp_min_(1e-38).log_().neg_().log_()
                action = (log_probs - gumbel).argmax(-1, keepdim=True)
                batch, rewards, terminated, truncated, infos = self.env.step(action.numpy().reshape(-1))
                obs = torch.from_numpy(batch).float()
                self.actions[:, t] = action[:, 0]
                self.logp[:, t] = log_probs.gather(-1, action)[:, 0]
                self.obs[:, t + 1] = obs
                self.rewards[:, t] = torch.from_numpy(rewards)
                self.terminated[:, t] = torch.from_numpy(terminated)
                self.truncated[:, t] = torch.from_numpy(truncated)
                if "final_obs" in infos:
                    for i in np.flatnonzero(infos["_final_obs"]):
                        self.final_obs[i, t] = torch.from_numpy(infos["final_obs"][i])
            # every observation's value (the last one bootstraps) and truncated episodes' final ones
            self.values.copy_(self.critic(self.obs).squeeze(-1))
            copies, steps = self.truncated.nonzero(as_tuple=True)
            if copies.numel():
                self.final_values[copies, steps] = self.critic(self.final_obs[copies, steps]).squeeze(-1)


def plain_copy(layers: torch.nn.Sequential) -> torch.nn.Sequential:
    """``layers`` (rl8lite's MLP) as a plain ``nn.Sequential`` of ``nn.Linear`` (same weights)
    and torch's own activation modules."""
    plain: list[torch.nn.Module] = []
    for layer in layers:
        if isinstance(layer, torch.nn.Linear):
            linear = torch.nn.Linear(layer.in_features, layer.out_features)
            linear.load_state_dict(layer.state_dict())
            plain.append(linear)
        elif isinstance(layer, torch.nn.Tanh):  # rl8lite's in-place tanh subclasses it
            plain.append(torch.nn.Tanh())
        elif isinstance(layer, torch.nn.ReLU):
            plain.append(torch.nn.ReLU())
        else:
            raise TypeError(f"plain_copy: no plain counterpart for {layer!r}")
    return torch.nn.Sequential(*plain)


def loop_steps_per_s(loop: HandWrittenRollout, steps: int) -> float:
    start = clock()
    for _ in range(steps // (loop.env.num_envs * loop.horizon)):
        loop.collect()
    return steps / (clock() - start)


def collect_steps_per_s(algo: Algorithm, steps: int) -> float:
    start = clock()
    for _ in range(steps // (algo.hparams.num_envs * algo.hparams.horizon)):
        algo.collect()
    return steps / (clock() - start)



def measure(
    env_id: str, mode: str, config: dict[str, Any], repeats: int, collects: int
) -> dict[str, Any]:
    n, horizon = config["num_envs"], config["horizon"]
    steps = collects * n * horizon
    vector_cls = SyncVectorEnv if mode == "sync" else AsyncVectorEnv
    def make_vector_env() -> Any:
        return vector_cls(
            [functools.partial(gymnasium.make, env_id)] * n,
            copy=False,
            autoreset_mode=AutoresetMode.SAME_STEP,
        )

    vector_env = make_vector_env()
    vector_env.reset(seed=0)
    vector_env.action_space.seed(0)
    env_cls = gymnasium_env(env_id, vectorization_mode=mode)
    algo = Algorithm(env_cls, seed=0, device="cpu", **config)
    algo.collect()  # warm-up: the first reset, lazy allocations
    env = env_cls(n)
    env.reset()
    model = algo.policy.model  # the default model: separate actor and critic MLPs
    loop = HandWrittenRollout(make_vector_env(), plain_copy(model.actor), plain_copy(model.critic), horizon)
    loop.collect()
    timings: dict[str, Any] = {
        "gymnasium": lambda: gymnasium_steps_per_s(vector_env, steps),
        "collect": lambda: collect_steps_per_s(algo, steps),
        "adapter step": lambda: adapter_steps_per_s(env, steps),
        "loop": lambda: loop_steps_per_s(loop, steps),
    }
    rates: dict[str, list[float]] = {name: [] for name in timings}
    try:
        for repeat in range(repeats):
            names = list(timings)
            for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
                rates[name].append(timings[name]())
            print(
                f"  {env_id} {mode} {n} envs, repeat {repeat}: "
                + ", ".join(f"{name} {rates[name][-1]:,.0f}" for name in timings)
                + " env steps/s",
                flush=True,
            )
    finally:
        algo.close()
        env.close()
        vector_env.close()
        loop.env.close()
    ratios = {
        name: [a / b for a, b in zip(rates[name], rates["gymnasium"])]
        for name in ("collect", "adapter step", "loop")
    }
    collect_to_loop = [a / b for a, b in zip(rates["collect"], rates["loop"])]
    return {
        "num_envs": n,
        "horizon": horizon,
        "env_steps_per_timing": steps,
        "env_steps_per_s": {name: spread(values) for name, values in rates.items()},
        "ratio_to_gymnasium": {name: spread(values) for name, values in ratios.items()},
        "collect_to_loop": spread(collect_to_loop),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="+", choices=sorted(CASES), default=sorted(CASES))
    parser.add_argument("--modes", nargs="+", choices=["sync", "async"], default=["sync", "async"])
    parser.add_argument(
        "--num-envs", type=int, nargs="+", help="copies (default: each config's num_envs)"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--collects", type=int, default=16, help="collects' worth of env steps per timing"
    )
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    if args.clock == "cpu" and "async" in args.modes:
        parser.error("--clock cpu times this process only: use it with --modes sync")
    global clock
    clock = CLOCKS[args.clock]
    torch.set_num_threads(1)
    results = {}
    for env_id in args.envs:
        for mode in args.modes:
            for n in args.num_envs or [CASES[env_id]["num_envs"]]:
                config = {**CASES[env_id], "num_envs": n}
                results[f"{env_id} {mode} {n} envs"] = measure(
                    env_id, mode, config, args.repeats, args.collects
                )
    columns = ("collect / gymnasium", "adapter step / gymnasium", "loop / gymnasium", "collect / loop")
    print(f"\n{'env, mode, copies':<28} {'gymnasium steps/s':>18}" + "".join(f"  {c:>24}" for c in columns)
          + "   (min / median / max)")
    for name, r in results.items():
        ratios = r["ratio_to_gymnasium"]
        spreads = [ratios["collect"], ratios["adapter step"], ratios["loop"], r["collect_to_loop"]]
        shown = ["  ".join(f"{s[q]:.2f}" for q in ("min", "median", "max")) for s in spreads]
        print(f"{name:<28} {r['env_steps_per_s']['gymnasium']['median']:>18,.0f}" + "".join(f"  {x:>24}" for x in shown))
    if args.json:
        write_results(
            args.json,
            {
                "repeats": args.repeats,
                "clock": args.clock,
                "configs": {e: CASES[e] for e in args.envs},
                "results": results,
            },
        )


if __name__ == "__main__":
    main()
