"""Chunk sizes on CPU: what ``"auto"`` picks for a model, against fixed sizes, one torch thread.

``update_chunk_size`` is the largest number of samples in one forward/backward of the
update, ``collect_chunk_size`` the largest number of env copies in one policy forward
while collecting. Two modes, both timing rl8lite's CartPole (horizon 32, 4 whole-buffer
passes) with the default 2x64 tanh model and a 2x256 one, repeats interleaved:

- ``compare`` (default): ``"auto"`` against a fixed 2048 for both chunks (the CPU
  default before ``"auto"`` followed the model's width), collect and update timed
  separately, ratio fixed / auto per repeat (> 1: ``"auto"`` faster);
- ``sweep``: the update (and the collect) at each of ``--sizes`` (and no chunking),
  to see where the best size lies for each model and env count.

Times are this process's CPU time by default (with one torch thread, the wall time of an
idle machine; time other processes take from the core does not count).

Usage:
    python benchmarks/chunks.py                                      # 256 ... 16384 envs
    python benchmarks/chunks.py --envs 256 4096 --repeats 5 --json benchmarks/results/chunks.json
    python benchmarks/chunks.py --mode sweep --envs 1024 --sizes 1024 4096 16384
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

from rl8lite import Algorithm
from rl8lite.examples import CartPole

sys.path.insert(0, str(Path(__file__).parent))
from provenance import write_results
from timing import collect_and_update_ms, spread

MODELS: dict[str, dict[str, Any]] = {
    "2x64 tanh": {"hiddens": [64, 64], "activation": "tanh"},
    "2x256 relu": {"hiddens": [256, 256], "activation": "relu"},
}
CONFIG: dict[str, Any] = {"horizon": 32, "num_sgd_iters": 4, "sgd_minibatch_size": None,
                          "horizons_per_env_reset": -1}


def build(num_envs: int, model_config: dict[str, Any], chunk: int | str | None) -> Algorithm:
    return Algorithm(CartPole, num_envs=num_envs, seed=0, model_config=model_config,
                     update_chunk_size=chunk, collect_chunk_size=chunk, **CONFIG)


def time_variants(variants: dict[str, Algorithm], repeats: int, iterations: int, clock: Any) -> dict[str, Any]:
    """``{name: {"collect": [ms...], "update": [ms...]}}``, the variants' order alternating per repeat."""
    for algo in variants.values():
        collect_and_update_ms(algo, 1, clock)  # warm-up: allocator, first-step checks
    times: dict[str, dict[str, list[float]]] = {n: {"collect": [], "update": []} for n in variants}
    names = list(variants)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            collect, update = collect_and_update_ms(variants[name], iterations, clock)
            times[name]["collect"].append(collect)
            times[name]["update"].append(update)
    return times


def compare(num_envs: int, model: str, repeats: int, iterations: int, clock: Any) -> dict[str, Any]:
    variants = {"fixed 2048": build(num_envs, MODELS[model], 2048), "auto": build(num_envs, MODELS[model], "auto")}
    times = time_variants(variants, repeats, iterations, clock)
    auto = variants["auto"]
    out: dict[str, Any] = {
        "num_envs": num_envs, "model": model, "repeats": repeats, "iterations_per_repeat": iterations,
        "auto_update_chunk": auto.update_chunk_samples, "auto_collect_chunk": auto.recurrence.chunk_rows,
    }
    for name in variants:
        out[name] = {phase: spread(ms) for phase, ms in times[name].items()}
    out["ratio_fixed_over_auto"] = {
        phase: spread([f / a for f, a in zip(times["fixed 2048"][phase], times["auto"][phase])])
        for phase in ("collect", "update")
    }
    return out


def sweep(num_envs: int, model: str, sizes: list[int], repeats: int, iterations: int, clock: Any) -> dict[str, Any]:
    rows = num_envs * CONFIG["horizon"]
    variants = {str(size): build(num_envs, MODELS[model], size) for size in sizes if size < rows}
    variants["none"] = build(num_envs, MODELS[model], None)
    variants["auto"] = build(num_envs, MODELS[model], "auto")
    times = time_variants(variants, repeats, iterations, clock)
    return {"num_envs": num_envs, "model": model, "repeats": repeats, "iterations_per_repeat": iterations,
            "auto_update_chunk": variants["auto"].update_chunk_samples,
            "auto_collect_chunk": variants["auto"].recurrence.chunk_rows,
            "ms": {name: {phase: spread(ms) for phase, ms in t.items()} for name, t in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=["compare", "sweep"], default="compare")
    parser.add_argument("--envs", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384, 32768])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=1, help="collect + step iterations per repeat")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    results = []
    for model in args.models:
        for num_envs in args.envs:
            if args.mode == "compare":
                r = compare(num_envs, model, args.repeats, args.iterations, clock)
                u, c = r["ratio_fixed_over_auto"]["update"], r["ratio_fixed_over_auto"]["collect"]
                print(f"{model:10s} {num_envs:6d} envs  auto chunks: update {r['auto_update_chunk']}, collect"
                      f" {r['auto_collect_chunk']}  |  fixed 2048 / auto, update {u['min']:.2f} / {u['median']:.2f} /"
                      f" {u['max']:.2f}, collect {c['min']:.2f} / {c['median']:.2f} / {c['max']:.2f} (min/median/max)",
                      flush=True)
            else:
                r = sweep(num_envs, model, args.sizes, args.repeats, args.iterations, clock)
                cells = "  ".join(f"{n}: {t['update']['median']:.0f}/{t['collect']['median']:.0f}" for n, t in r["ms"].items())
                print(f"{model:10s} {num_envs:6d} envs  median ms update/collect  {cells}"
                      f"  (auto: {r['auto_update_chunk']}/{r['auto_collect_chunk']})", flush=True)
            r["clock"] = args.clock
            results.append(r)
    if args.json is not None:
        write_results(args.json, {"mode": args.mode, "config": CONFIG, "results": results})


if __name__ == "__main__":
    main()
