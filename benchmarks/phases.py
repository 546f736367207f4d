"""Where one training iteration's time goes, per phase, per env count.

rl8lite on rl8's CartPole at rl8's defaults (the ``--compare-rl8`` setting of
``throughput.py``: horizon 32, 4 whole-buffer SGD passes, 2x256 ReLU MLPs),
one torch thread. For each env count it reports the median over ``--repeats``
iterations of:

- collect: the whole ``Algorithm.collect()``, split into the policy's sampling
  step (``policy.act``, on ``collect_chunk_size`` copies at a time), the env's
  ``step`` (both timed alone, times the horizon) and the rest (buffer writes,
  bootstrap values, statistics);
- update: the whole ``Algorithm.step()``, split with ``torch.profiler`` into
  matrix multiplies (``aten::mm``/``addmm``: forward and backward of the
  linear layers), the optimizer step, and the rest (elementwise forward and
  backward ops, the loss, GAE, autograd bookkeeping);
- the matrix-multiply floor: the update's linear-layer FLOPs divided by the
  rate a plain ``addmm`` of the hidden layer's shape (one chunk's rows) reaches
  on this core: roughly the least time the same update's matmuls can take here.

Usage:
    python benchmarks/phases.py                       # 8, 256, 1024, 4096 envs
    python benchmarks/phases.py --envs 8 1024 --json phases.json
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from rl8lite import Algorithm
from rl8lite.models.default import flat_obs_size

sys.path.insert(0, str(Path(__file__).parent))
import itertools

from provenance import write_results
from rl8_cartpole import RL8CartPole
from throughput import RL8_DEFAULTS

GEMMS = ("aten::mm", "aten::addmm")


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Silence the profiler's C++ start/stop lines (written to file descriptor 2)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def per_call_ms(fn: Callable[[], Any], calls: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1000 * (time.perf_counter() - start) / calls


def gemm_gflops(rows: int, width: int) -> float:
    """What ``addmm`` reaches here for ``[rows, width] @ [width, width]``."""
    a, w, b = torch.randn(rows, width), torch.randn(width, width), torch.randn(width)
    ms = per_call_ms(lambda: torch.addmm(b, a, w), max(5, int(2e8 / (2 * rows * width * width))))
    return 2 * rows * width * width / (ms / 1000) / 1e9


def update_flops(samples: int, obs_size: int, hiddens: list[int], outputs: tuple[int, int], passes: int) -> float:
    """Linear-layer FLOPs of ``passes`` forward+backward passes of the actor and critic MLPs."""
    total = 0.0
    for out in outputs:
        widths = [obs_size, *hiddens, out]
        for i, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
            # forward, weight gradient, and (except the first layer) input gradient
            total += (2 if i == 0 else 3) * 2 * samples * fan_in * fan_out
    return total * passes


def phases(num_envs: int, repeats: int) -> dict[str, Any]:
    algo = Algorithm(RL8CartPole, num_envs=num_envs, seed=0, **RL8_DEFAULTS)
    horizon = algo.hparams.horizon
    for _ in range(2):
        algo.collect()
        algo.step()
    collect_ms, update_ms, gemm_ms, optim_ms = [], [], [], []
    for _ in range(repeats):
        collect_ms.append(algo.collect()["profiling/collect_ms"])
        update_ms.append(algo.step()["profiling/step_ms"])
        # Profiled separately: the profiler's own cost inflates the many small ops.
        algo.collect()
        with quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            algo.step()
        events = {e.key: e for e in prof.key_averages()}
        gemm_ms.append(sum(events[k].self_cpu_time_total for k in GEMMS if k in events) / 1000)
        optim_ms.append(sum(e.cpu_time_total for k, e in events.items() if k.startswith("Optimizer.step")) / 1000)
    obs = algo.env.reset()
    actions = torch.ones(num_envs, 1, dtype=torch.long)
    calls = max(10, 2048 // num_envs)
    with torch.inference_mode():
        act_ms = per_call_ms(lambda: algo.recurrence.act(obs, 0, False), calls) * horizon
        env_ms = per_call_ms(lambda: algo.env.step(actions), calls) * horizon
    algo.env.reset()
    med = statistics.median
    hiddens = RL8_DEFAULTS["model_config"]["hiddens"]
    samples = num_envs * horizon
    heads = (algo.policy.distribution_cls.num_inputs(algo.env.action_spec), 1)  # actor, critic
    flops = update_flops(samples, flat_obs_size(algo.env.observation_spec), hiddens, heads,
                         RL8_DEFAULTS["num_sgd_iters"])
    rate = gemm_gflops(min(samples, algo.update_chunk_samples or samples), hiddens[-1])
    collect, update = med(collect_ms), med(update_ms)
    return {
        "num_envs": num_envs,
        "collect_ms": collect, "act_ms": act_ms, "env_step_ms": env_ms,
        "collect_rest_ms": collect - act_ms - env_ms,
        "update_ms": update, "gemm_ms": med(gemm_ms), "optimizer_ms": med(optim_ms),
        "update_rest_ms": update - med(gemm_ms) - med(optim_ms),
        "update_gflop": flops / 1e9, "gemm_gflops": rate, "gemm_floor_ms": flops / (rate * 1e9) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 256, 1024, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print("ms per iteration (median): collect = act + env.step + rest; update = matmul + optimizer + rest\n")
    header = (f"{'envs':>5} | {'collect':>8} {'act':>7} {'env':>7} {'rest':>6} | {'update':>8} {'matmul':>8}"
              f" {'optim':>6} {'rest':>7} | {'matmul floor':>12} (GFLOP at GFLOP/s)")
    print(header)
    print("-" * len(header))
    rows = []
    for num_envs in args.envs:
        r = phases(num_envs, args.repeats)
        rows.append(r)
        print(f"{num_envs:>5} | {r['collect_ms']:>8.1f} {r['act_ms']:>7.1f} {r['env_step_ms']:>7.1f}"
              f" {r['collect_rest_ms']:>6.1f} | {r['update_ms']:>8.1f} {r['gemm_ms']:>8.1f} {r['optimizer_ms']:>6.1f}"
              f" {r['update_rest_ms']:>7.1f} | {r['gemm_floor_ms']:>12.1f} ({r['update_gflop']:.2f} at"
              f" {r['gemm_gflops']:.0f})", flush=True)
    if args.json:
        write_results(args.json, {"config": RL8_DEFAULTS, "threads": 1, "results": rows})


if __name__ == "__main__":
    main()
