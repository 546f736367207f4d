"""Env steps and wall time to *solve* the example envs, and the same for SB3's PPO.

"Solved" is judged on the training episodes, the same way for every library:
after each collect (rl8lite) or rollout (SB3), take the episodes completed in
the most recent collects/rollouts, going back until they hold at least
``--window`` episodes; the env is solved when their mean return reaches the
threshold (CartPole 475, Pendulum -200). The env steps and the wall time
(from building the algorithm, or SB3's vec env and model, to that check; one
torch thread; no experiment tracking) are recorded. Runs that have not solved
within a cap (rl8lite: 500k CartPole, 2M Pendulum env steps; SB3: rl-zoo's
100k) count as unsolved: "unsolved" in the table, infinite in the medians.

``rl8-cartpole`` (rl8's own example, which never terminates) is judged by
rl8's training metric instead, ``returns/mean`` (rewards summed over a 64-step
collect from a fresh reset, averaged over copies) reaching -11.8, the level
rl8 1.0.0 levels off at. rl8 averages it over its 8192 copies; rl8lite trains
on 32, so when a training collect reaches the level the policy is re-measured
over 8192 fresh copies (the clock stopped), and only that counts.
``--rl8`` also runs rl8 itself on it.

rl8lite runs ``Algorithm(Env, seed=s, **CONFIG)`` with the tuned configs of
``rl8lite.examples.configs`` (``collect`` + ``step``, no MLflow). ``gym-cartpole``
and ``gym-acrobot`` are Gymnasium's ``CartPole-v1`` and ``Acrobot-v1`` through
``rl8lite.env.gymnasium_env`` (sync vector env). If ``stable_baselines3`` is
importable (``pip install -e '.[bench]'``), the same invocation also runs SB3 PPO
with rl-zoo's tuned hyperparameters on the Gymnasium env each of ``cartpole``,
``gym-cartpole`` and ``gym-acrobot`` stands for, interleaved seed by seed with
rl8lite's runs, and prints the wall-time ratios rl8lite / SB3. CartPole-v1: 8 envs,
n_steps 32, batch 256, gae_lambda 0.8, gamma 0.98, 20 epochs, lr and clip linearly
decayed from 1e-3 and 0.2 over rl-zoo's 1e5 steps, no entropy bonus. Acrobot-v1: 16
envs, n_steps 256, gae_lambda 0.94, gamma 0.99, 4 epochs, no entropy bonus,
observations and rewards normalised (``VecNormalize``, gamma 0.99), SB3's other
defaults (batch 64, lr 3e-4, clip 0.2), 1e6 steps. Both: 64x64 tanh MLPs.

Usage:
    python benchmarks/solve.py                          # CartPole and Pendulum, seeds 0 1 2
    python benchmarks/solve.py --envs cartpole --seeds 0 1 2 3 --json out.json
    python benchmarks/solve.py --no-sb3                 # skip SB3 even if installed
    python benchmarks/solve.py --envs rl8-cartpole --rl8 # rl8's example; --rl8 adds rl8 itself (~25 min)
    python benchmarks/solve.py --envs cartpole --amp     # also enable_amp=True (bf16 autocast on CPU)
    python benchmarks/solve.py --envs gym-cartpole gym-acrobot --json benchmarks/results/solve-gymnasium.json

``--amp`` runs every rl8lite seed twice, fp32 and ``enable_amp=True``
(bf16 autocast in the update on CPU), interleaved, and prints whether the
bf16 median of env steps to solve lies within the fp32 runs' min-max range.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rl8lite import Algorithm
from rl8lite.env import gymnasium_env
from rl8lite.examples import CartPole, Pendulum
from rl8lite.examples.configs import ACROBOT, CARTPOLE, PENDULUM, RL8_CARTPOLE

sys.path.insert(0, str(Path(__file__).parent))
from provenance import write_results
from rl8_cartpole import RL8CartPole

ENVS: dict[str, dict[str, Any]] = {
    "cartpole": {"env_cls": CartPole, "config": CARTPOLE, "threshold": 475.0,
                 "max_steps": 500_000, "sb3": "CartPole-v1"},
    "gym-cartpole": {"env_cls": lambda: gymnasium_env("CartPole-v1"), "config": CARTPOLE,
                     "threshold": 475.0, "max_steps": 500_000, "sb3": "CartPole-v1"},
    "gym-acrobot": {"env_cls": lambda: gymnasium_env("Acrobot-v1"), "config": ACROBOT,
                    "threshold": -100.0, "max_steps": 1_000_000, "sb3": "Acrobot-v1"},
    "pendulum": {"env_cls": Pendulum, "config": PENDULUM, "threshold": -200.0,
                 "max_steps": 2_000_000},
    # rl8's own example: never terminates, so "solved" is rl8's training metric
    # (returns/mean: the mean over copies of the rewards summed over one 64-step
    # collect from a fresh reset) reaching the level where rl8 levels off.
    "rl8-cartpole": {"env_cls": RL8CartPole, "config": RL8_CARTPOLE, "threshold": -11.8,
                     "max_steps": 100_000_000, "metric": "returns/mean"},
}

#: rl8 1.0.0 on its CartPole example: its defaults (8192 envs) and horizon 64, 40 steps.
RL8_SOLVE_STEPS = 40
#: Copies for re-measuring rl8lite's returns/mean at the crossing (rl8 trains on 8192).
CONFIRM_COPIES = 8192

#: rl-zoo's tuned PPO hyperparameters (rl-baselines3-zoo, hyperparams/ppo.yml); a "lin_"
#: rate decays linearly to 0 over n_timesteps; "normalize" wraps the vec env in VecNormalize.
SB3_HYPERPARAMETERS: dict[str, dict[str, Any]] = {
    "CartPole-v1": {
        "n_envs": 8, "n_timesteps": 100_000, "n_steps": 32, "batch_size": 256, "gae_lambda": 0.8,
        "gamma": 0.98, "n_epochs": 20, "ent_coef": 0.0, "lin_learning_rate": 1e-3, "lin_clip_range": 0.2,
    },
    "Acrobot-v1": {
        "normalize": True, "n_envs": 16, "n_timesteps": 1_000_000, "n_steps": 256, "gae_lambda": 0.94,
        "gamma": 0.99, "n_epochs": 4, "ent_coef": 0.0,
    },
}


class WindowMean:
    """Mean return of the episodes in the latest collects holding >= ``window`` episodes."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.collects: deque[tuple[float, float]] = deque()  # (count, return sum)

    def add(self, count: float, return_sum: float) -> float:
        """Record one collect's episodes; return the window's mean (NaN while too few)."""
        if count:
            self.collects.append((count, return_sum))
        # drop the oldest collect while the others still hold >= window episodes
        while (len(self.collects) > 1
               and sum(c for c, _ in self.collects) - self.collects[0][0] >= self.window):
            self.collects.popleft()
        total = sum(c for c, _ in self.collects)
        if total < self.window:
            return math.nan
        return sum(s for _, s in self.collects) / total


def solve_rl8lite(
    env_cls: type, config: dict[str, Any], seed: int, threshold: float, max_steps: int,
    window: int, metric: str | None = None,
) -> dict[str, Any]:
    """Train until the window mean (or ``metric`` of a collect) reaches ``threshold``."""
    start = time.perf_counter()
    algo = Algorithm(env_cls, seed=seed, device="cpu", **config)
    try:
        return _solve(algo, env_cls, start, threshold, max_steps, window, metric)
    finally:
        algo.close()  # a Gymnasium env's workers


def _solve(
    algo: Algorithm, env_cls: type, start: float, threshold: float, max_steps: int, window: int,
    metric: str | None,
) -> dict[str, Any]:
    meter = WindowMean(window)
    steps, mean = 0, math.nan
    while steps < max_steps:
        stats = algo.collect()
        steps += int(stats["env/steps"])
        count = stats.get("episodes/count", 0.0)
        if metric is not None:
            mean = stats[metric]
        else:
            mean = meter.add(count, stats["episodes/return_mean"] * count if count else 0.0)
        if mean >= threshold and metric == "returns/mean":
            # Confirm over as many copies as rl8 trains on; the clock stops meanwhile.
            paused = time.perf_counter()
            mean = confirm_returns_mean(algo, env_cls)
            start += time.perf_counter() - paused
        if mean >= threshold:
            return {"solved": True, "env_steps": steps, "seconds": time.perf_counter() - start,
                    "window_mean": mean}
        algo.step()
    return {"solved": False, "env_steps": steps, "seconds": time.perf_counter() - start,
            "window_mean": mean}


def confirm_returns_mean(algo: Algorithm, env_cls: type, copies: int = CONFIRM_COPIES) -> float:
    """``returns/mean`` of the current (sampling) policy over ``copies`` fresh copies for one horizon."""
    env = env_cls(copies, algo.hparams.horizon)
    obs, total = env.reset(), torch.zeros(copies, 1)
    with torch.inference_mode():
        for _ in range(algo.hparams.horizon):
            out = env.step(algo.policy.act(obs)[0])
            obs, total = out["obs"], total + out["rewards"]
    return float(total.mean())


def solve_rl8(seed: int, threshold: float, threads: int) -> dict[str, Any]:
    """rl8 1.0.0 on its CartPole example in its own venv (see throughput.py), same rule."""
    from throughput import rl8_python

    worker = Path(__file__).parent / "_rl8_solve_worker.py"
    command = [str(rl8_python()), str(worker), str(threads), str(RL8_SOLVE_STEPS), str(seed)]
    history = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            history.append(json.loads(line))
            print(f"  rl8 step {history[-1]['step']:>2}: returns/mean {history[-1]['returns/mean']:.2f}"
                  f" at {history[-1]['seconds']:.0f} s", flush=True)
    if process.returncode:
        raise RuntimeError(f"rl8's worker failed with status {process.returncode}")
    hit = next((h for h in history if h["returns/mean"] >= threshold), None)
    last = history[-1]
    return {"solved": hit is not None, "env_steps": (hit or last)["env_steps"],
            "seconds": (hit or last)["seconds"], "window_mean": (hit or last)["returns/mean"],
            "best": max(h["returns/mean"] for h in history), "history": history}


def sb3_available() -> bool:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return False
    return True


def solve_sb3(env_id: str, seed: int, threshold: float, max_steps: int, window: int) -> dict[str, Any]:
    """SB3 PPO (rl-zoo hyperparameters) on the Gymnasium env ``env_id``, same stopping rule."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    hp = SB3_HYPERPARAMETERS[env_id]
    meter = WindowMean(window)
    result: dict[str, Any] = {"solved": False, "window_mean": math.nan}

    class StopAtThreshold(BaseCallback):
        """Groups finished episodes by rollout; stops training once the window mean is reached."""

        stop = False

        def _on_rollout_start(self) -> None:
            self.returns: list[float] = []

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:  # added by make_vec_env's Monitor wrapper
                    self.returns.append(float(info["episode"]["r"]))
            return not self.stop

        def _on_rollout_end(self) -> None:
            mean = meter.add(len(self.returns), sum(self.returns))
            result["window_mean"] = mean
            if mean >= threshold and not result["solved"]:
                result.update(solved=True, env_steps=self.num_timesteps,
                              seconds=time.perf_counter() - start)
                self.stop = True  # SB3 reads the stop signal from _on_step's return

    def linear(initial: float) -> Callable[[float], float]:
        return lambda progress_remaining: progress_remaining * initial

    start = time.perf_counter()
    env = make_vec_env(env_id, n_envs=hp["n_envs"], seed=seed)
    if hp.get("normalize"):  # rl-zoo passes its gamma on to VecNormalize
        env = VecNormalize(env, gamma=hp["gamma"])
    options = {k: hp[k] for k in ("n_steps", "batch_size", "gae_lambda", "gamma", "n_epochs", "ent_coef") if k in hp}
    for name in ("learning_rate", "clip_range"):
        if f"lin_{name}" in hp:
            options[name] = linear(hp[f"lin_{name}"])
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **options)
    # The linear schedules run over rl-zoo's budget; past it SB3 would keep lr = 0.
    model.learn(total_timesteps=min(max_steps, hp["n_timesteps"]), callback=StopAtThreshold())
    if not result["solved"]:
        result.update(env_steps=model.num_timesteps, seconds=time.perf_counter() - start)
    env.close()
    return result


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    solved = [r for r in runs if r["solved"]]
    out: dict[str, Any] = {"solved": f"{len(solved)}/{len(runs)}"}
    for key in ("env_steps", "seconds"):
        values = [r[key] if r["solved"] else math.inf for r in runs]
        out[key] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
    return out


def fmt(value: float, kind: str) -> str:
    if math.isinf(value):
        return "unsolved"
    return f"{value / 1000:.0f}k" if kind == "env_steps" else f"{value:.1f} s"


def print_table(rows: dict[str, dict[str, Any]]) -> None:
    print(f"\n{'run':<22} {'solved':>6}  {'env steps min/median/max':>26}"
          f"  {'wall time min/median/max':>26}")
    for name, s in rows.items():
        steps = " / ".join(fmt(s["env_steps"][k], "env_steps") for k in ("min", "median", "max"))
        secs = " / ".join(fmt(s["seconds"][k], "seconds") for k in ("min", "median", "max"))
        print(f"{name:<22} {s['solved']:>6}  {steps:>26}  {secs:>26}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs", nargs="+", choices=sorted(ENVS), default=["cartpole", "pendulum"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--window", type=int, default=20,
                        help="episodes (at least) in the mean that must reach the threshold")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-sb3", action="store_true", help="skip SB3 even if it is installed")
    parser.add_argument("--rl8", action="store_true",
                        help="with rl8-cartpole: also run rl8 1.0.0 itself, one seed (20-25 minutes)")
    parser.add_argument("--amp", action="store_true",
                        help="also run rl8lite with enable_amp=True (bf16 autocast on CPU)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    use_sb3 = any("sb3" in ENVS[n] for n in args.envs) and not args.no_sb3 and sb3_available()
    print(f"torch {torch.__version__}, {args.threads} torch thread(s),"
          f" {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs,"
          f" load average {os.getloadavg()[0]:.2f}, window {args.window} episodes;"
          f" SB3: {'yes' if use_sb3 else 'not run'}")

    runs: dict[str, list[dict[str, Any]]] = {}
    for name in args.envs:
        spec = ENVS[name]
        env_cls = spec["env_cls"] if isinstance(spec["env_cls"], type) else spec["env_cls"]()
        for seed in args.seeds:
            for amp in (False, True) if args.amp else (False,):
                label = f"rl8lite {name}" + (" bf16" if amp else "")
                config = {**spec["config"], "enable_amp": True} if amp else spec["config"]
                result = solve_rl8lite(env_cls, config, seed, spec["threshold"],
                                       spec["max_steps"], args.window, spec.get("metric"))
                runs.setdefault(label, []).append({"seed": seed, **result})
                print(f"{label:<22} seed {seed}: {result}", flush=True)
            if use_sb3 and "sb3" in spec:
                result = solve_sb3(spec["sb3"], seed, spec["threshold"], spec["max_steps"], args.window)
                runs.setdefault(f"sb3 {name}", []).append({"seed": seed, **result})
                print(f"{f'sb3 {name}':<22} seed {seed}: {result}", flush=True)
        if name == "rl8-cartpole" and args.rl8:
            result = solve_rl8(args.seeds[0], spec["threshold"], args.threads)
            runs.setdefault("rl8 rl8-cartpole", []).append({"seed": args.seeds[0], **result})
            print(f"rl8 rl8-cartpole seed {args.seeds[0]}: solved {result['solved']},"
                  f" {result['seconds']:.0f} s, best returns/mean {result['best']:.2f}", flush=True)

    rows = {name: summary(r) for name, r in runs.items()}
    print_table(rows)
    ratios: dict[str, dict[str, Any]] = {}
    for name in args.envs:
        if f"sb3 {name}" not in rows:
            continue
        ours, theirs = rows[f"rl8lite {name}"]["seconds"], rows[f"sb3 {name}"]["seconds"]
        ratio = ours["median"] / theirs["median"]
        per_seed = [a["seconds"] / b["seconds"] if a["solved"] and b["solved"] else math.nan
                    for a, b in zip(runs[f"rl8lite {name}"], runs[f"sb3 {name}"])]
        ratios[name] = {"ratio_of_medians": ratio, "per_seed": per_seed}
        shown = f"{ratio:.3f} (1/{1 / ratio:.1f})" if 0 < ratio < math.inf else f"{ratio}"
        print(f"\n{name} ({ENVS[name]['sb3']} for SB3) wall time to solve, rl8lite / SB3 (medians):"
              f" {shown}; per seed: {', '.join(f'{r:.3f}' for r in per_seed)}")
    for name in args.envs if args.amp else ():
        fp32, bf16 = rows[f"rl8lite {name}"]["env_steps"], rows[f"rl8lite {name} bf16"]["env_steps"]
        within = fp32["min"] <= bf16["median"] <= fp32["max"]
        print(f"{name}: bf16 median env steps to solve {bf16['median']:.0f}, fp32 range"
              f" {fp32['min']:.0f}-{fp32['max']:.0f}: {'within' if within else 'outside'} the fp32 runs' spread")
    if "rl8 rl8-cartpole" in rows and "rl8lite rl8-cartpole" in rows:
        ours = rows["rl8lite rl8-cartpole"]["seconds"]["median"]
        theirs = rows["rl8 rl8-cartpole"]["seconds"]["median"]
        ratio = ours / theirs
        ratios["rl8-cartpole vs rl8"] = {"ratio_of_medians": ratio}
        shown = f"{ratio:.4f} (1/{1 / ratio:.0f})" if 0 < ratio < math.inf else f"{ratio}"
        print(f"rl8's CartPole wall time to returns/mean >= {ENVS['rl8-cartpole']['threshold']},"
              f" rl8lite / rl8 (medians): {shown}")
    if args.json:
        write_results(args.json, json.loads(json.dumps(
            {"threads": args.threads, "window": args.window, "seeds": args.seeds,
             "configs": {n: ENVS[n]["config"] for n in args.envs},
             "sb3_config": {n: SB3_HYPERPARAMETERS[ENVS[n]["sb3"]] for n in args.envs
                            if use_sb3 and "sb3" in ENVS[n]},
             "runs": runs, "summary": rows, "ratios_rl8lite_over_sb3": ratios}, default=str)))


if __name__ == "__main__":
    main()
