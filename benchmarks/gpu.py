"""Full-iteration throughput on a GPU: CartPole at rl8's defaults, 4096-65536 envs.

Each configuration builds ``Algorithm(CartPole, device="cuda", ...)`` at rl8's
default hyperparameters (as ``throughput.py``), runs 2 warm-up iterations and
then times ``--repeats`` collect + step iterations (synchronising the device),
printing env transitions per second (min / median / max) per env count and
``update_chunk_size`` ("auto", the default: whole-buffer passes on a GPU; 2048, the CPU
choice for 2x256 MLPs; "none").

Usage:
    python benchmarks/gpu.py --envs 4096 16384 65536 --json gpu.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from rl8lite import Algorithm
from rl8lite.examples import CartPole

from provenance import write_results

sys.path.insert(0, str(Path(__file__).parent))
from throughput import CONFIG  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, nargs="+", default=[4096, 16384, 65536])
    parser.add_argument("--chunks", nargs="+", default=["auto", "2048", "none"], help="update_chunk_size values ('none': whole buffer)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; CartPole, rl8's defaults (horizon 32,"
          f" 4 whole-buffer passes, 2x256 MLPs); env steps/s min / median / max over {args.repeats}")
    rows = []
    for num_envs in args.envs:
        for chunk in args.chunks:
            size = None if chunk == "none" else (chunk if chunk == "auto" else int(chunk))
            algo = Algorithm(CartPole, num_envs=num_envs, seed=0, device="cuda",
                             **{**CONFIG, "update_chunk_size": size})
            for _ in range(2):
                algo.collect()
                algo.step()
            rates, collect_rates = [], []
            for _ in range(args.repeats):
                torch.cuda.synchronize()
                start = time.perf_counter()
                algo.collect()
                torch.cuda.synchronize()
                middle = time.perf_counter()
                algo.step()
                torch.cuda.synchronize()
                end = time.perf_counter()
                steps = num_envs * algo.hparams.horizon
                rates.append(steps / (end - start))
                collect_rates.append(steps / (middle - start))
            row = {"num_envs": num_envs, "update_chunk_size": size,
                   "full": [min(rates), statistics.median(rates), max(rates)],
                   "collect": [min(collect_rates), statistics.median(collect_rates), max(collect_rates)],
                   "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20}
            rows.append(row)
            print(f"{num_envs:>6} envs, chunk {chunk:>5}: full {' / '.join(f'{r:,.0f}' for r in row['full'])},"
                  f" collect {' / '.join(f'{r:,.0f}' for r in row['collect'])}", flush=True)
            del algo
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    if args.json:
        write_results(args.json, {"device": torch.cuda.get_device_name(), "results": rows})


if __name__ == "__main__":
    main()
