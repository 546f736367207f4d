"""Env transitions per second: rl8lite vs a framework-free torch loop doing the same work.

For each env count it measures, interleaved over repeats (the machine is noisy):

- collect-only: ``horizon`` policy samples + env steps written into a
  preallocated ``[N, T + 1]`` buffer, then the bootstrap value and the
  collect statistics;
- full iteration: collect + GAE + ``num_sgd_iters`` PPO passes.

The framework-free loop ("bare") is written in this file: the same env, the
same actor and critic MLPs, the same sampling, buffer writes, GAE and PPO
loss, with no library code. Its throughput is our physical limit on this
machine. Ratios are rl8lite / bare per repeat pair (> 1: rl8lite faster).

With ``--compare-rl8`` it instead times full iterations of rl8 1.0.0 and
rl8lite back to back on rl8's own CartPole example (``rl8_cartpole.py``, one
env class for both) at rl8's default hyperparameters. rl8 and rl8lite need
different tensordict/mlflow versions, so rl8 runs in its own venv
(``benchmarks/.rl8-venv``, created on first use) as a worker process that
the timing loop drives request by request, interleaved with rl8lite.

Usage:
    python benchmarks/throughput.py                   # 8, 256, 1024, 4096 envs
    python benchmarks/throughput.py --envs 8 256 --repeats 3 --json out.json
    python benchmarks/throughput.py --compare-rl8 --envs 8 1024 4096
    python benchmarks/throughput.py --compare-rl8 --compile --update-chunk-size 4096
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from rl8lite import Algorithm
from rl8lite.examples import CartPole
from rl8lite.models.mlp import mlp

# rl8's defaults: horizon 32, 4 SGD passes over the whole buffer, 2x256 MLPs, Adam lr 1e-3.
CONFIG: dict[str, Any] = {
    "horizon": 32,
    "num_sgd_iters": 4,
    "sgd_minibatch_size": None,
    "optimizer_config": {"lr": 1e-3},
    "model_config": {"hiddens": [256, 256], "activation": "relu"},
    "horizons_per_env_reset": 1,
}


def plain_mlp(model: nn.Sequential) -> nn.Sequential:
    """The same layers and initial weights as plain ``nn.Linear`` and out-of-place ``nn.ReLU``
    in an ``nn.Sequential`` (rl8lite's MLP, its ``Linear`` and its in-place activations change
    how the forward and backward run, not the math)."""
    layers: list[nn.Module] = []
    for layer in model:
        if isinstance(layer, nn.Linear):
            plain = nn.Linear(layer.in_features, layer.out_features)
            plain.load_state_dict(layer.state_dict())
            layer = plain
        elif isinstance(layer, nn.ReLU):
            layer = nn.ReLU()
        layers.append(layer)
    return nn.Sequential(*layers)


class BareLoop:
    """PPO on CartPole with plain torch: what rl8lite does, minus the library."""

    def __init__(self, num_envs: int, horizon: int, hiddens: list[int], num_sgd_iters: int) -> None:
        self.env = CartPole(num_envs, horizon)
        self.n, self.t = num_envs, horizon
        # Plain nn.Sequential of nn.Linear, as a hand-written loop (and rl8) would have it.
        self.actor = plain_mlp(mlp(4, hiddens, 2, "relu", out_gain=0.01))
        self.critic = plain_mlp(mlp(4, hiddens, 1, "relu", out_gain=1.0))
        params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = torch.optim.Adam(params, lr=1e-3, fused=True)  # as rl8lite's default
        self.params = params
        self.num_sgd_iters = num_sgd_iters
        shape = (num_envs, horizon + 1)
        self.obs = torch.zeros(*shape, 4)
        self.actions = torch.zeros(*shape, 1, dtype=torch.long)
        self.logp = torch.zeros(*shape, 1)
        self.values = torch.zeros(*shape, 1)
        self.rewards = torch.zeros(*shape, 1)
        self.terminated = torch.zeros(*shape, 1, dtype=torch.bool)
        self.truncated = torch.zeros(*shape, 1, dtype=torch.bool)

    def collect(self) -> float:
        with torch.inference_mode():
            obs = self.env.reset()
            self.obs[:, 0] = obs
            for t in range(self.t):
                log_probs = torch.log_softmax(self.actor(obs), -1)
                values = self.critic(obs)
                index = torch.multinomial(log_probs.exp(), 1)
                out = self.env.step(index)
                obs = out["obs"]
                self.actions[:, t] = index
                self.logp[:, t] = log_probs.gather(-1, index)
                self.values[:, t] = values
                self.rewards[:, t] = out["rewards"]
                self.obs[:, t + 1] = obs
                self.terminated[:, t] = out["terminated"]
                self.truncated[:, t] = out["truncated"]
            self.values[:, self.t] = self.critic(obs)
            returns = self.rewards[:, : self.t, 0].sum(1)
            return float(returns.mean())

    def update(self) -> float:
        n, horizon, gamma, lam = self.n, self.t, 0.99, 0.95
        rewards = self.rewards[:, :horizon, 0]
        values = self.values[:, :, 0]
        terminated = self.terminated[:, :horizon, 0]
        truncated = self.truncated[:, :horizon, 0]
        next_values = torch.where(truncated, values[:, :-1], values[:, 1:])
        next_values = torch.where(terminated, torch.zeros_like(next_values), next_values)
        continues = (~(terminated | truncated)).float()
        deltas = (rewards + gamma * next_values - values[:, :-1]).t().contiguous()
        decay = (gamma * lam * continues).t().contiguous()
        adv = torch.empty_like(deltas)
        running = torch.zeros(n)
        for t in range(horizon - 1, -1, -1):
            running = deltas[t] + decay[t] * running
            adv[t] = running
        adv = adv.t()
        returns = (adv + values[:, :-1]).reshape(-1, 1)
        adv = ((adv - adv.mean()) / (adv.std() + 1e-8)).reshape(-1, 1)
        obs = self.obs[:, :horizon].reshape(-1, 4)
        actions = self.actions[:, :horizon].reshape(-1, 1)
        old_logp = self.logp[:, :horizon].reshape(-1, 1)
        for _ in range(self.num_sgd_iters):
            log_probs = torch.log_softmax(self.actor(obs), -1)
            logp = log_probs.gather(-1, actions)
            ratio = (logp - old_logp).exp()
            policy_loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
            vf_loss = 0.5 * (self.critic(obs) - returns).square().mean()
            entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
            loss = policy_loss + 0.5 * vf_loss - 0.0 * entropy
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = torch.nn.utils.get_total_norm([p.grad for p in self.params], foreach=True)
            torch.nn.utils.clip_grads_with_norm_(self.params, 1.0, norm, foreach=True)
            self.optimizer.step()
        return float(loss.detach())


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def summary(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def bench(num_envs: int, repeats: int, iterations: int, options: dict[str, Any]) -> dict[str, Any]:
    horizon = CONFIG["horizon"]
    algo = Algorithm(CartPole, num_envs=num_envs, seed=0, **{**CONFIG, **options})
    bare = BareLoop(num_envs, horizon, CONFIG["model_config"]["hiddens"], CONFIG["num_sgd_iters"])
    steps = num_envs * horizon * iterations

    def ours_collect() -> None:
        for _ in range(iterations):
            algo.collect()
            algo.state.buffered = False

    def bare_collect() -> None:
        for _ in range(iterations):
            bare.collect()

    def ours_full() -> None:
        for _ in range(iterations):
            algo.collect()
            algo.step()

    def bare_full() -> None:
        for _ in range(iterations):
            bare.collect()
            bare.update()

    results: dict[str, Any] = {"num_envs": num_envs}
    for phase, ours, theirs in (("collect", ours_collect, bare_collect), ("full", ours_full, bare_full)):
        ours(), theirs()  # warm-up
        ours_rates, bare_rates, ratios = [], [], []
        for i in range(repeats):
            # Alternate who goes first so drifting load hits both sides alike.
            if i % 2:
                t_bare, t_ours = timed(theirs), timed(ours)
            else:
                t_ours, t_bare = timed(ours), timed(theirs)
            ours_rates.append(steps / t_ours)
            bare_rates.append(steps / t_bare)
            ratios.append(t_bare / t_ours)
        results[phase] = {
            "rl8lite": summary(ours_rates),
            "bare": summary(bare_rates),
            "ratio": summary(ratios),
        }
    return results


RL8_VENV = Path(__file__).parent / ".rl8-venv"

# rl8 1.0.0's defaults, spelled out for rl8lite (the value-loss form differs:
# rl8 clamps a smooth-L1 loss at vf_clip_param, rl8lite clips V around V_old).
RL8_DEFAULTS: dict[str, Any] = {
    "horizon": 32,
    "horizons_per_env_reset": 1,
    "gamma": 0.95,
    "gae_lambda": 0.95,
    "num_sgd_iters": 4,
    "sgd_minibatch_size": None,
    "clip_param": 0.2,
    "vf_coeff": 1.0,
    "max_grad_norm": 5.0,
    "optimizer_config": {"lr": 1e-3},
    "model_config": {"hiddens": [256, 256], "activation": "relu"},
}


def rl8_python() -> Path:
    """The rl8 venv's python, creating the venv (torch 2.13.0 + rl8 1.0.0) if needed."""
    python = RL8_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {RL8_VENV} with rl8 1.0.0 (one-off, a few minutes)...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(RL8_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0", "rl8==1.0.0"], check=True)
    return python


def compare_rl8(envs: list[int], repeats: int, threads: int, options: dict[str, Any]) -> list[dict[str, Any]]:
    sys.path.insert(0, str(Path(__file__).parent))
    from rl8_cartpole import RL8CartPole

    worker = subprocess.Popen(
        [str(rl8_python()), str(Path(__file__).parent / "_rl8_worker.py"), str(threads)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert worker.stdin is not None and worker.stdout is not None

    def rl8_seconds(num_envs: int, iterations: int) -> float:
        worker.stdin.write(f"{num_envs} {iterations}\n")
        worker.stdin.flush()
        return json.loads(worker.stdout.readline())["seconds"]

    rows = []
    try:
        for num_envs in envs:
            iterations = max(1, 256 // num_envs)
            steps = num_envs * RL8_DEFAULTS["horizon"] * iterations
            algo = Algorithm(RL8CartPole, num_envs=num_envs, seed=0, **{**RL8_DEFAULTS, **options})

            def ours() -> None:
                for _ in range(iterations):
                    algo.collect()
                    algo.step()

            ours()  # warm-up (rl8's worker warms up on its first request)
            rl8_seconds(num_envs, 1)
            ours_rates, rl8_rates, ratios = [], [], []
            for i in range(repeats):
                if i % 2:
                    t_rl8, t_ours = rl8_seconds(num_envs, iterations), timed(ours)
                else:
                    t_ours, t_rl8 = timed(ours), rl8_seconds(num_envs, iterations)
                ours_rates.append(steps / t_ours)
                rl8_rates.append(steps / t_rl8)
                ratios.append(t_rl8 / t_ours)
            row = {"num_envs": num_envs, "rl8lite": summary(ours_rates), "rl8": summary(rl8_rates),
                   "ratio": summary(ratios)}
            rows.append(row)
            fmt = lambda s: f"{s['min']:>8,.0f} {s['median']:>8,.0f} {s['max']:>8,.0f}"  # noqa: E731
            r = row["ratio"]
            print(f"{num_envs:>6} | {fmt(row['rl8lite'])} | {fmt(row['rl8'])} |"
                  f" {r['min']:.2f} {r['median']:.2f} {r['max']:.2f}", flush=True)
    finally:
        worker.stdin.close()
        worker.wait(timeout=60)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 256, 1024, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--compare-rl8", action="store_true",
                        help="time rl8 1.0.0 against rl8lite (full iterations, rl8's CartPole and defaults)")
    parser.add_argument("--compile", action="store_true", help="rl8lite with compile=True")
    parser.add_argument("--update-chunk-size", type=int, default=None,
                        help="rl8lite's update_chunk_size (default: the library's, 'auto' = 2048 on CPU)")
    args = parser.parse_args()
    # Options that change speed, never the math of the update.
    options: dict[str, Any] = {"compile": args.compile}
    if args.update_chunk_size is not None:
        options["update_chunk_size"] = args.update_chunk_size
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.compare_rl8:
        print(f"rl8's CartPole example, rl8's defaults (horizon 32, 4 whole-buffer passes, 2x256 MLPs),"
              f" full iterations, {args.threads} torch thread(s), {args.repeats} interleaved repeats, rl8lite options {options}\n")
        header = f"{'envs':>6} | {'rl8lite steps/s':>26} | {'rl8 steps/s':>26} | {'ratio rl8lite/rl8':>18}"
        print(header)
        print("-" * len(header))
        rows = compare_rl8(args.envs, args.repeats, args.threads, options)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"mode": "compare-rl8", "config": RL8_DEFAULTS, "options": options, "threads": args.threads,
                           "results": rows}, f, indent=2)
        return
    rows = []
    print(f"CartPole, horizon {CONFIG['horizon']}, 2x256 ReLU actor + critic, {CONFIG['num_sgd_iters']} whole-buffer"
          f" SGD passes, {args.threads} torch thread(s), {args.repeats} interleaved repeats (min/median/max)\n")
    header = f"{'envs':>6} | {'phase':>8} | {'rl8lite steps/s':>26} | {'bare steps/s':>26} | {'ratio rl8lite/bare':>20}"
    print(header)
    print("-" * len(header))
    for num_envs in args.envs:
        iterations = max(1, 256 // num_envs)  # >= 256 env steps per timed call, kept short
        result = bench(num_envs, args.repeats, iterations, options)
        rows.append(result)
        for phase in ("collect", "full"):
            r = result[phase]
            fmt = lambda s: f"{s['min']:>8,.0f} {s['median']:>8,.0f} {s['max']:>8,.0f}"  # noqa: E731
            ratio = r["ratio"]
            print(f"{num_envs:>6} | {phase:>8} | {fmt(r['rl8lite'])} | {fmt(r['bare'])} |"
                  f" {ratio['min']:.2f} {ratio['median']:.2f} {ratio['max']:.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": CONFIG, "options": options, "threads": args.threads, "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()
