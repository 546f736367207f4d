"""Env steps per second on a CUDA GPU: rl8lite (CUDA graphs on and off) against a framework-free
GPU loop doing the same work and against rsl_rl 5.5.1 (Isaac Lab's default PPO), 4096-65536 envs.

Every side trains rl8lite's batched CartPole on the GPU with the configuration of
``against_rsl_rl.py`` (horizon 32, 4 whole-buffer Adam steps at lr 1e-3, 2x64 tanh actor and
critic, GAE 0.99/0.95, clip 0.2, entropy 0.01, gradient norm 1.0, no reward or observation
normalisation). Timed, with the device synchronised, repeats interleaved (the order rotates):

- full iteration: a collect and an update (rsl_rl: ``OnPolicyRunner.learn(n)``, no logging);
- collect: the rollout alone (rsl_rl: the span its runner reports as collection time).

The framework-free loop (:class:`BareLoop`) is what a user would write by hand with plain torch:
``nn.Sequential`` MLPs, ``torch.multinomial`` sampling, the critic at every step, GAE and the PPO
loss in a few lines, eager. Ratios are per repeat, min / median / max.

Usage:
    python benchmarks/gpu.py --envs 4096 16384 65536 --json benchmarks/results/gpu.json
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
import itertools

from against_rsl_rl import HIDDENS, HORIZON, LR, PASSES, SEED, Rl8lite
from provenance import write_results
from timing import spread

from rl8lite.examples import CartPole


def tanh_mlp(sizes: list[int], head_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        linear = nn.Linear(a, b)
        nn.init.orthogonal_(linear.weight, head_gain if i == len(sizes) - 2 else math.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers += [linear] + ([nn.Tanh()] if i < len(sizes) - 2 else [])
    return nn.Sequential(*layers)


class BareLoop:
    """PPO on CartPole with plain torch on the GPU: the same work as rl8lite's, no library."""

    def __init__(self, num_envs: int, device: str) -> None:
        torch.manual_seed(SEED)
        self.env, self.n, self.t = CartPole(num_envs, HORIZON, device=device), num_envs, HORIZON
        self.actor = tanh_mlp([4, *HIDDENS, 2], 0.01).to(device)
        self.critic = tanh_mlp([4, *HIDDENS, 1], 1.0).to(device)
        self.params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = torch.optim.Adam(self.params, lr=LR, fused=True)
        zeros = lambda *shape, dtype=torch.float32: torch.zeros(num_envs, HORIZON + 1, *shape, dtype=dtype,
                                                                device=device)
        self.obs, self.actions, self.logp = zeros(4), zeros(1, dtype=torch.long), zeros(1)
        self.values, self.rewards = zeros(1), zeros(1)
        self.terminated, self.truncated = zeros(1, dtype=torch.bool), zeros(1, dtype=torch.bool)
        self.last_obs = self.env.reset()

    def collects(self, n: int) -> None:
        for _ in range(n):
            self._collect()

    def iterations(self, n: int) -> None:
        for _ in range(n):
            self._collect()
            self._update()

    def _collect(self) -> None:
        with torch.inference_mode():
            obs = self.last_obs
            self.obs[:, 0] = obs
            for t in range(self.t):
                log_probs = torch.log_softmax(self.actor(obs), -1)
                index = torch.multinomial(log_probs.exp(), 1)
                out = self.env.step(index)
                self.actions[:, t], self.logp[:, t] = index, log_probs.gather(-1, index)
                self.values[:, t], self.rewards[:, t] = self.critic(obs), out["rewards"]
                self.terminated[:, t], self.truncated[:, t] = out["terminated"], out["truncated"]
                obs = out["obs"]
                self.obs[:, t + 1] = obs
            self.values[:, self.t] = self.critic(obs)
            self.last_obs = obs

    def _update(self) -> None:
        gamma, lam, t = 0.99, 0.95, self.t
        values, rewards = self.values[:, :, 0], self.rewards[:, :t, 0]
        terminated, truncated = self.terminated[:, :t, 0], self.truncated[:, :t, 0]
        next_values = torch.where(terminated, 0.0, torch.where(truncated, values[:, :-1], values[:, 1:]))
        deltas = rewards + gamma * next_values - values[:, :-1]
        decay = gamma * lam * (~(terminated | truncated)).float()
        adv = torch.zeros_like(deltas)
        running = torch.zeros(self.n, device=deltas.device)
        for step in range(t - 1, -1, -1):
            running = deltas[:, step] + decay[:, step] * running
            adv[:, step] = running
        returns = (adv + values[:, :-1]).reshape(-1, 1)
        adv = ((adv - adv.mean()) / (adv.std() + 1e-8)).reshape(-1, 1)
        obs, actions, old_logp = (x[:, :t].reshape(-1, x.shape[-1]) for x in (self.obs, self.actions, self.logp))
        for _ in range(PASSES):
            log_probs = torch.log_softmax(self.actor(obs), -1)
            ratio = (log_probs.gather(-1, actions) - old_logp).exp()
            policy_loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
            vf_loss = 0.5 * (self.critic(obs) - returns).square().mean()
            entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
            loss = policy_loss + 0.5 * vf_loss - 0.01 * entropy
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.params, 1.0, foreach=True)
            self.optimizer.step()


def sides(num_envs: int, device: str, with_rsl_rl: bool) -> dict[str, Any]:
    made: dict[str, Any] = {
        "rl8lite": Rl8lite(num_envs, device, cuda_graphs="auto"),
        "rl8lite_eager": Rl8lite(num_envs, device, cuda_graphs=False),
        "loop": BareLoop(num_envs, device),
    }
    if with_rsl_rl:
        from against_rsl_rl import RslRl

        made["rsl_rl"] = RslRl(num_envs, device)
    return made


def rate(run: Callable[[int], None], iterations: int, steps: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    run(iterations)
    torch.cuda.synchronize()
    return steps / (time.perf_counter() - start)


def measure(num_envs: int, repeats: int, device: str, with_rsl_rl: bool) -> dict[str, Any]:
    made = sides(num_envs, device, with_rsl_rl)
    iterations = max(2, 2**21 // (num_envs * HORIZON))
    steps = num_envs * HORIZON * iterations
    for side in made.values():  # warm-up: first-step checks, graph capture, cuBLAS handles
        side.iterations(3)
        side.collects(2)
    rates: dict[str, dict[str, list[float]]] = {name: {"iteration": [], "collect": []} for name in made}
    names = list(made)
    for repeat in range(repeats):
        for name in names[repeat % len(names):] + names[: repeat % len(names)]:
            rates[name]["iteration"].append(rate(made[name].iterations, iterations, steps))
            rates[name]["collect"].append(rate(made[name].collects, iterations, steps))
    out: dict[str, Any] = {"num_envs": num_envs, "repeats": repeats, "iterations_per_repeat": iterations,
                           "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20}
    for name in names:
        out[name] = {phase: spread(r) for phase, r in rates[name].items()}
    for other in names[1:]:
        out[f"rl8lite_over_{other}"] = {phase: spread([a / b for a, b in zip(rates["rl8lite"][phase], rates[other][phase])])
                                        for phase in ("iteration", "collect")}
    graphs = made["rl8lite"].algo
    out["rl8lite_graphs"] = {"off": graphs.graphs_off, "rollout": graphs.rollout.graphed is not None}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[4096, 16384, 65536])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-rsl-rl", action="store_true", help="leave rsl_rl out")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; CartPole, horizon {HORIZON}, {PASSES}"
          f" whole-buffer Adam steps, 2x64 tanh; env steps/s medians, ratios rl8lite / other min-median-max",
          flush=True)
    results = []
    for num_envs in args.envs:
        r = measure(num_envs, args.repeats, "cuda", not args.no_rsl_rl)
        results.append(r)
        for phase in ("iteration", "collect"):
            line = [f"{num_envs:>6} {phase:>9}:"] + [f"{name} {r[name][phase]['median']:>12,.0f}" for name in
                                                     ("rl8lite", "rl8lite_eager", "loop", "rsl_rl") if name in r]
            line += [f"/{k.removeprefix('rl8lite_over_')} {v[phase]['min']:.2f}-{v[phase]['median']:.2f}-{v[phase]['max']:.2f}"
                     for k, v in r.items() if k.startswith("rl8lite_over_")]
            print(" | ".join(line), flush=True)
        del r
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    if args.json:
        write_results(args.json, {"device": torch.cuda.get_device_name(), "results": results})


if __name__ == "__main__":
    main()
