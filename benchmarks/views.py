"""A view requirement against an env that stacks its own frames: the same model inputs, two costs.

Both runs train the same MLP on the last 16 CartPole observations (zeros before the
episode's first): one with ``ViewRequirement(shift=15)`` on the plain env (the buffer
holds each observation once, windows are built from it), one on
``frame_stacked(CartPole, 16)`` (the env stacks the frames; the buffer holds every
stack, 16 times the observations). The two train bit for bit alike
(``tests/test_windowed.py``); this measures their time per iteration (collect + update)
and their buffers, one torch thread, repeats interleaved so that drifts of the machine
hit both.

Usage:
    python benchmarks/views.py                               # 256 and 1024 envs
    python benchmarks/views.py --envs 256 --repeats 7 --json benchmarks/results/views.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

from rl8lite import Algorithm
from rl8lite.data import DataKeys
from rl8lite.examples import CartPole
from rl8lite.models import Model
from rl8lite.views import ViewRequirement

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # frame_stacked is a test fixture
from helpers import frame_stacked
from provenance import write_results
from timing import collect_and_update_ms, spread

FRAMES = 16


class FrameMLP(Model):
    """A 2x64 tanh MLP over 16 frames: a view's window (``window=True``) or the env's stack."""

    def __init__(self, observation_spec: Any, action_spec: Any, /, *, window: bool = False) -> None:
        super().__init__(observation_spec, action_spec, window=window)
        self.window = window
        if window:
            self.view_requirements[DataKeys.OBS] = ViewRequirement(shift=FRAMES - 1)
        width = 4 * FRAMES
        self.net = torch.nn.Sequential(
            torch.nn.Linear(width, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 3)
        )

    def forward(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x = obs[DataKeys.INPUTS] if self.window else obs
        out = self.net(x.flatten(1))
        return out[:, :2], out[:, 2:]


def build(window: bool, num_envs: int) -> Algorithm:
    env_cls = CartPole if window else frame_stacked(CartPole, FRAMES)
    return Algorithm(env_cls, num_envs=num_envs, horizon=32, seed=0, model_cls=FrameMLP,
                     model_config={"window": window}, horizons_per_env_reset=-1)


def measure(num_envs: int, repeats: int, iterations: int, clock: Any = time.process_time) -> dict[str, Any]:
    runs = {"view": build(True, num_envs), "env_stack": build(False, num_envs)}
    for algo in runs.values():
        collect_and_update_ms(algo, 2, clock)  # warm-up: allocator, first-step checks
    times: dict[str, dict[str, list[float]]] = {n: {"collect": [], "update": [], "total": []} for n in runs}
    for repeat in range(repeats):
        for name in (list(runs) if repeat % 2 == 0 else list(runs)[::-1]):
            collect, update = collect_and_update_ms(runs[name], iterations, clock)
            times[name]["collect"].append(collect)
            times[name]["update"].append(update)
            times[name]["total"].append(collect + update)
    out: dict[str, Any] = {"num_envs": num_envs, "horizon": 32, "frames": FRAMES, "repeats": repeats,
                           "iterations_per_repeat": iterations}
    for name, algo in runs.items():
        out[name] = {phase: spread(values) for phase, values in times[name].items()}
        out[name]["buffer_bytes"] = algo.memory_stats()["memory/buffer_bytes"]
        out[name]["obs_bytes"] = sum(v.nbytes for v in [algo.buffer[DataKeys.OBS]]) + algo.recurrence.state_bytes()
    out["ratio_view_over_env_stack"] = {
        phase: [a / b for a, b in zip(times["view"][phase], times["env_stack"][phase])] for phase in ("collect", "update", "total")
    }
    out["ratio_view_over_env_stack"] = {p: spread(r) for p, r in out["ratio_view_over_env_stack"].items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=3, help="collect + step iterations per repeat")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                        help="this process's CPU time (default: robust to other processes) or wall time")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = []
    for num_envs in args.envs:
        clock = time.process_time if args.clock == "cpu" else time.perf_counter
        result = measure(num_envs, args.repeats, args.iterations, clock)
        result["clock"] = args.clock
        results.append(result)
        for name in ("view", "env_stack"):
            r = result[name]
            print(f"{num_envs:5d} envs {name:9s} collect {r['collect']['median']:7.1f} ms  update"
                  f" {r['update']['median']:7.1f} ms  total {r['total']['min']:7.1f} / {r['total']['median']:7.1f} /"
                  f" {r['total']['max']:7.1f} ms (min/median/max)  buffer {r['buffer_bytes'] / 2**20:6.2f} MiB")
        ratio = result["ratio_view_over_env_stack"]["total"]
        print(f"{num_envs:5d} envs view / env stack, total: {ratio['min']:.3f} / {ratio['median']:.3f} / {ratio['max']:.3f}")
    if args.json is not None:
        write_results(args.json, {"views_vs_env_stack": results})


if __name__ == "__main__":
    main()
