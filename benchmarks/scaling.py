"""Data-parallel scaling: aggregate env steps/s of full iterations for 1 and 2 processes.

For each env count per process, it times full iterations (collect + update) of
CartPole at rl8's defaults (horizon 32, 4 whole-buffer passes, 2x256 ReLU MLPs) in one
process and in two processes started by ``torchrun`` (gloo, one torch thread each),
interleaved over repeats, and prints the aggregate env steps/s, the speed-up over one
process (ideal: 2x) and the share of an iteration the two-process run spends in
collectives (gradient all-reduces, whole-batch statistics, agreed decisions).

Usage:
    python benchmarks/scaling.py                       # 256 1024 4096 envs per process, 3 repeats
    python benchmarks/scaling.py --envs 1024 --repeats 5 --json benchmarks/results/scaling.json
    python benchmarks/scaling.py --backend nccl        # on a GPU machine: 1-rank NCCL overhead
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from provenance import write_results
from timing import spread

CONFIG: dict[str, Any] = {
    "horizon": 32, "num_sgd_iters": 4, "sgd_minibatch_size": None, "horizons_per_env_reset": 1,
    "optimizer_config": {"lr": 1e-3}, "model_config": {"hiddens": [256, 256], "activation": "relu"},
}


def worker(num_envs: int, iterations: int, out: str, device: str, group: bool) -> None:
    """Time ``iterations`` full iterations after one warm-up; rank 0 writes the result.

    ``group``: start the process group even for one process (to measure its cost there).
    """
    from rl8lite import Algorithm
    from rl8lite.examples import CartPole

    torch.set_num_threads(1)
    if group and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    algo = Algorithm(CartPole, num_envs=num_envs, seed=0, device=device, **CONFIG)
    algo.collect()
    algo.step()
    ranks = algo.ranks
    ranks.barrier()
    start, collectives = time.perf_counter(), ranks.collective_seconds
    for _ in range(iterations):
        algo.collect()
        algo.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    ranks.barrier()
    seconds = time.perf_counter() - start
    if ranks.is_main:
        steps = iterations * num_envs * CONFIG["horizon"] * ranks.world_size
        Path(out).write_text(json.dumps({
            "env_steps_per_s": steps / seconds,
            "collective_share": (ranks.collective_seconds - collectives) / seconds,
        }))


def launch(processes: int, num_envs: int, iterations: int, device: str, group: bool = False) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "result.json")
        args = [__file__, "--worker", str(num_envs), "--iterations", str(iterations), "--out", out, "--device", device]
        if group:
            args.append("--group")
        if processes == 1 and not group:
            command = [sys.executable, *args]  # no process group at all
        else:
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                       f"--nproc_per_node={processes}", *args]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"{processes} process(es), {num_envs} envs failed:\n{done.stderr[-3000:]}")
        return json.loads(Path(out).read_text())



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, nargs="+", default=[256, 1024, 4096], help="env copies per process")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=5, help="timed iterations per launch")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--backend", choices=["gloo", "nccl"], default="gloo",
                        help="nccl: one rank per GPU; with one GPU, 1 rank under torchrun against no process group")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    parser.add_argument("--group", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.iterations, args.out, args.device, args.group)
        return
    device = "cuda" if args.backend == "nccl" else "cpu"
    many = args.processes if device == "cpu" else torch.cuda.device_count()
    # One GPU holds one rank: then the comparison is 1 rank in an NCCL group against none.
    group_of_one = many == 1
    print(f"CartPole, rl8's defaults, full iterations; aggregate env steps/s over {args.repeats} interleaved"
          f" repeats (min / median / max); {many} process(es) vs 1, {args.backend}")
    rows = []
    for num_envs in args.envs:
        single, multi, share = [], [], []
        for _ in range(args.repeats):
            one = launch(1, num_envs, args.iterations, device)
            several = launch(many, num_envs, args.iterations, device, group=group_of_one)
            single.append(one["env_steps_per_s"])
            multi.append(several["env_steps_per_s"])
            share.append(several["collective_share"])
        speedups = [m / s for m, s in zip(multi, single)]
        row = {"num_envs_per_process": num_envs, "processes": many, "one_process": spread(single),
               "processes_total": spread(multi), "speedup": spread(speedups), "collective_share": spread(share)}
        rows.append(row)
        print(f"{num_envs:>6} envs/process | 1: {row['one_process']['median']:>10,.0f} | {many}:"
              f" {row['processes_total']['median']:>10,.0f} | speed-up {speedups and min(speedups):.2f} /"
              f" {row['speedup']['median']:.2f} / {max(speedups):.2f} (ideal {many}) | in collectives"
              f" {100 * row['collective_share']['median']:.1f}%", flush=True)
    if args.json:
        write_results(args.json, {"config": CONFIG, "backend": args.backend, "results": rows})


if __name__ == "__main__":
    main()
