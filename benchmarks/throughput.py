"""Env transitions per second: rl8lite vs framework-free torch loops doing the same work.

For each env count it measures, interleaved over repeats (the machine is noisy):

- collect-only: ``horizon`` policy samples + env steps written into a
  preallocated ``[N, T + 1]`` buffer, then the bootstrap value and the
  collect statistics;
- full iteration: collect + GAE + ``num_sgd_iters`` PPO passes.

Two framework-free loops are written in this file, with the same env, actor and
critic MLPs, buffer writes, GAE and PPO loss, and no rl8lite algorithm, buffer or
trainer code: "bare", the straightforward way (the critic at every step,
``torch.multinomial``, plain ``nn.Linear``, one whole-buffer forward/backward per
pass, and no statistics, reward normalisation or ``final_obs``), and "tuned", the
same math with rl8lite's shortcuts written by hand (``TunedBareLoop``), which also
does rl8lite's statistics, reward normalisation, finiteness check and ``final_obs``
bootstrapping with rl8lite's model layers and pure math functions. The tuned loop
is the bar: rl8lite / tuned near 1 means the library costs nothing over a
hand-tuned loop. Ratios are rl8lite / loop per repeat (> 1: rl8lite faster).

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
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from provenance import write_results
from timing import spread
from torch import nn

from rl8lite import Algorithm
from rl8lite.algorithms.statistics import discounted_return_trace, episode_returns
from rl8lite.examples import CartPole
from rl8lite.models.default import mlp
from rl8lite.nn.ppo import gae, normalization

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

    def _advantages(self) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE over the buffer: normalised advantages and returns, ``[N * T, 1]`` each."""
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
        return adv, returns

    def _samples(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rollout's observations, actions and log-probabilities, ``[N * T, ...]`` each."""
        horizon = self.t
        return (self.obs[:, :horizon].reshape(-1, 4), self.actions[:, :horizon].reshape(-1, 1),
                self.logp[:, :horizon].reshape(-1, 1))

    def update(self) -> float:
        adv, returns = self._advantages()
        obs, actions, old_logp = self._samples()
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


class TunedBareLoop(BareLoop):
    """The same PPO with rl8lite's shortcuts written by hand: the bar a framework must meet.

    Each is the same math: rl8lite's model layers (in-place ReLU; a first layer whose
    weight gradient is computed as ``x^T g``), Gumbel-max sampling, the critic run once
    over all observations after the rollout, forwards over at most 2048 copies, and the
    update in contiguous 2048-sample chunks whose gradients add up to the whole buffer's
    (no shuffle: one optimizer step per pass sees every sample).

    It also does the rest of rl8lite's default work, with rl8lite's pure math functions:
    ``final_obs`` kept and valued for truncated copies, reward normalisation (the std of
    the discounted-return trace), and the statistics rl8lite reports (returns, rewards,
    episodes), read to the host once per collect.
    """

    CHUNK = 2048

    def __init__(self, num_envs: int, horizon: int, hiddens: list[int], num_sgd_iters: int) -> None:
        super().__init__(num_envs, horizon, hiddens, num_sgd_iters)
        self.actor = mlp(4, hiddens, 2, "relu", out_gain=0.01)
        self.critic = mlp(4, hiddens, 1, "relu", out_gain=1.0)
        self.params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = torch.optim.Adam(self.params, lr=1e-3, fused=True)
        self.final_obs = torch.zeros(num_envs, horizon + 1, 4)
        self.final_values = torch.zeros(num_envs, horizon + 1, 1)
        self.reward_scale = 1.0
        self.carry = {"return": torch.zeros(num_envs), "length": torch.zeros(num_envs, dtype=torch.long),
                      "discounted": torch.zeros(num_envs)}
        self.recent = torch.zeros(0, 2, dtype=torch.float64)  # the last 100 episodes' returns, lengths

    def _sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_probs = torch.log_softmax(self.actor(obs), -1)
        gumbel = torch.rand_like(log_probs).clamp_min_(torch.finfo(torch.float32).tiny).log_().neg_().log_()
        index = (log_probs - gumbel).argmax(-1, keepdim=True)
        return index, log_probs.gather(-1, index)

    def collect(self) -> float:
        with torch.inference_mode():
            obs = self.env.reset()
            self.obs[:, 0] = obs
            for t in range(self.t):
                parts = [self._sample(obs[i : i + self.CHUNK]) for i in range(0, self.n, self.CHUNK)]
                index, logp = parts[0] if len(parts) == 1 else (torch.cat(x) for x in zip(*parts))
                out = self.env.step(index)
                obs = out["obs"]
                self.actions[:, t] = index
                self.logp[:, t] = logp
                self.rewards[:, t] = out["rewards"]
                self.obs[:, t + 1] = obs
                self.terminated[:, t] = out["terminated"]
                self.truncated[:, t] = out["truncated"]
                self.final_obs[:, t] = out["final_obs"]
            rows = self.obs.reshape(-1, 4)
            values = self.values.reshape(-1, 1)
            for i in range(0, len(rows), self.CHUNK):
                values[i : i + self.CHUNK] = self.critic(rows[i : i + self.CHUNK])
            self.final_values[:, : self.t] = self.values[:, : self.t]
            truncated = self.truncated[:, : self.t, 0]
            copies, steps = truncated.nonzero(as_tuple=True)
            if copies.numel():
                self.final_values[copies, steps] = self.critic(self.final_obs[copies, steps])
            return self._statistics()

    def _statistics(self) -> float:
        rewards = self.rewards[:, : self.t, 0]
        ends = self.terminated[:, : self.t, 0] | self.truncated[:, : self.t, 0]
        finite = torch.stack([x.abs().max() for x in (self.obs, rewards)]).isfinite().all()
        trace = discounted_return_trace(rewards, self.carry["discounted"], gamma=0.99, episode_ends=ends)
        self.carry["discounted"] = trace[:, -1] * (~ends[:, -1]).float()
        episode_return, episode_length = episode_returns(rewards, ends, self.carry["return"], self.carry["length"])
        running = ~ends[:, -1]
        self.carry["return"] = (episode_return[:, -1] * running).float()
        self.carry["length"] = episode_length[:, -1].long() * running
        order = ends.t()
        ended = torch.stack([episode_return.t()[order], episode_length.t()[order]], dim=-1)
        self.recent = torch.cat([self.recent, ended])[-100:]
        returns = rewards.sum(1)
        stats = torch.stack([
            returns.min(), returns.max(), *torch.std_mean(returns, correction=0),
            rewards.min(), rewards.max(), *torch.std_mean(rewards, correction=0), trace.std(correction=0),
            ends.sum(), *self.recent.mean(0), *(self.recent[:, 0].aminmax() if len(self.recent) else (finite, finite)),
            finite,
        ]).double().tolist()
        self.reward_scale = stats[8]
        return stats[3]

    def _minibatch_loss(self, obs, actions, old_logp, adv, returns) -> torch.Tensor:  # type: ignore[no-untyped-def]
        log_probs = torch.log_softmax(self.actor(obs), -1)
        ratio = (log_probs.gather(-1, actions) - old_logp).exp()
        policy_loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
        vf_loss = 0.5 * (self.critic(obs) - returns).square().mean()
        entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
        return policy_loss + 0.5 * vf_loss - 0.0 * entropy

    def _advantages(self) -> tuple[torch.Tensor, torch.Tensor]:
        """GAE with normalised rewards, bootstrapping truncated copies from V(final_obs)."""
        horizon, gamma, lam = self.t, 0.99, 0.95
        advantages, returns = gae(
            self.rewards[:, :horizon, 0] / (self.reward_scale + 1e-8), self.values[:, :, 0],
            gamma=gamma, gae_lambda=lam, terminated=self.terminated[:, :horizon, 0],
            truncated=self.truncated[:, :horizon, 0], final_values=self.final_values[:, :horizon, 0],
        )
        mean, scale = normalization(advantages)
        return ((advantages - mean) / scale).reshape(-1, 1), returns.reshape(-1, 1)

    def update(self) -> float:
        adv, returns = self._advantages()
        obs, actions, old_logp = self._samples()
        size = len(obs)
        for _ in range(self.num_sgd_iters):
            self.optimizer.zero_grad(set_to_none=True)
            for i in range(0, size, self.CHUNK):
                part = slice(i, i + self.CHUNK)
                loss = self._minibatch_loss(obs[part], actions[part], old_logp[part], adv[part], returns[part])
                share = (min(size, i + self.CHUNK) - i) / size
                (loss if share == 1 else loss * share).backward()
            norm = torch.nn.utils.get_total_norm([p.grad for p in self.params], foreach=True)
            torch.nn.utils.clip_grads_with_norm_(self.params, 1.0, norm, foreach=True)
            self.optimizer.step()
        return float(loss.detach())


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start



def bench(num_envs: int, repeats: int, iterations: int, options: dict[str, Any]) -> dict[str, Any]:
    horizon, hiddens, passes = CONFIG["horizon"], CONFIG["model_config"]["hiddens"], CONFIG["num_sgd_iters"]
    algo = Algorithm(CartPole, num_envs=num_envs, seed=0, **{**CONFIG, **options})
    loops = {"bare": BareLoop(num_envs, horizon, hiddens, passes),
             "tuned": TunedBareLoop(num_envs, horizon, hiddens, passes)}
    steps = num_envs * horizon * iterations

    def ours(full: bool) -> Callable[[], None]:
        def run() -> None:
            for _ in range(iterations):
                algo.collect()
                if full:
                    algo.step()
                else:
                    algo.state.buffered = False
        return run

    def loop(name: str, full: bool) -> Callable[[], None]:
        def run() -> None:
            for _ in range(iterations):
                loops[name].collect()
                if full:
                    loops[name].update()
        return run

    results: dict[str, Any] = {"num_envs": num_envs}
    for phase, full in (("collect", False), ("full", True)):
        runners = {"rl8lite": ours(full), **{name: loop(name, full) for name in loops}}
        for run in runners.values():
            run()  # warm-up
        seconds: dict[str, list[float]] = {name: [] for name in runners}
        names = list(runners)
        for i in range(repeats):
            # Rotate who goes first so drifting load hits every side alike.
            for name in names[i % 3:] + names[: i % 3]:
                seconds[name].append(timed(runners[name]))
        results[phase] = {name: spread([steps / t for t in seconds[name]]) for name in runners}
        for name in loops:
            key = "ratio" if name == "bare" else f"ratio_{name}"
            results[phase][key] = spread([t / o for t, o in zip(seconds[name], seconds["rl8lite"])])
    return results


RL8_VENV = Path(__file__).parent / ".rl8-venv"

# rl8 1.0.0's defaults, spelled out for rl8lite, its value loss included (a smooth-L1 loss
# capped at 5): the same gradient per optimizer step.
RL8_DEFAULTS: dict[str, Any] = {
    "horizon": 32,
    "horizons_per_env_reset": 1,
    "gamma": 0.95,
    "gae_lambda": 0.95,
    "num_sgd_iters": 4,
    "sgd_minibatch_size": None,
    "clip_param": 0.2,
    "vf_coeff": 1.0,
    "vf_loss": "smooth_l1",
    "vf_clip_param": 5.0,
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

            def ours(algo: Algorithm = algo, iterations: int = iterations) -> None:
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
            row = {"num_envs": num_envs, "rl8lite": spread(ours_rates), "rl8": spread(rl8_rates),
                   "ratio": spread(ratios)}
            rows.append(row)
            fmt = lambda s: f"{s['min']:>8,.0f} {s['median']:>8,.0f} {s['max']:>8,.0f}"
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
                        help="rl8lite's update_chunk_size (default: the library's 'auto': 2048 on CPU for 2x256 MLPs)")
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
            write_results(args.json, {"mode": "compare-rl8", "config": RL8_DEFAULTS, "options": options,
                                      "threads": args.threads, "results": rows})
        return
    rows = []
    print(f"CartPole, horizon {CONFIG['horizon']}, 2x256 ReLU actor + critic, {CONFIG['num_sgd_iters']} whole-buffer"
          f" SGD passes, {args.threads} torch thread(s), {args.repeats} interleaved repeats (min/median/max)\n")
    print("steps/s are medians; ratios are rl8lite / loop per repeat, min / median / max."
          " bare: a straightforward hand-written loop; tuned: the same with rl8lite's shortcuts"
          " by hand (see TunedBareLoop)\n")
    header = (f"{'envs':>6} | {'phase':>8} | {'rl8lite':>8} {'bare':>8} {'tuned':>8} |"
              f" {'ratio vs bare':>16} | {'ratio vs tuned':>16}")
    print(header)
    print("-" * len(header))
    for num_envs in args.envs:
        iterations = max(1, 256 // num_envs)  # >= 256 iterations' worth of env copies per timed call
        result = bench(num_envs, args.repeats, iterations, options)
        rows.append(result)
        for phase in ("collect", "full"):
            r = result[phase]
            ratios = " | ".join(f"{x['min']:.2f} {x['median']:.2f} {x['max']:.2f}".rjust(16)
                                for x in (r["ratio"], r["ratio_tuned"]))
            print(f"{num_envs:>6} | {phase:>8} | {r['rl8lite']['median']:>8,.0f} {r['bare']['median']:>8,.0f}"
                  f" {r['tuned']['median']:>8,.0f} | {ratios}", flush=True)
    if args.json:
        write_results(args.json, {"config": CONFIG, "options": options, "threads": args.threads, "results": rows})


if __name__ == "__main__":
    main()
