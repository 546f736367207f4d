"""Peak memory of training against what it must hold: buffer + model + optimizer state.

For each env count, a fresh process builds ``Algorithm(CartPole, ...)`` at
rl8's defaults (as ``throughput.py``) and runs 3 collect + update iterations.
The peak is the growth of the process's resident-set high-water mark
(``VmHWM``, reset through ``/proc/self/clear_refs`` after imports) over its
size before the algorithm was built; the "held" sum is
``Algorithm.memory_stats()``'s buffer + model + optimizer bytes. Besides those,
an update holds the activations of one chunk (``update_chunk_size`` samples)
for its backward pass. ``collect+`` and ``update+`` are each phase's own
transient memory: its high-water mark above the resident size at its start.

``--malloc`` picks the allocator settings of the workers:

- ``live`` (the default): ``MALLOC_MMAP_THRESHOLD_=65536``, so every freed block
  of 64 KiB or more goes back to the OS at once and the peak is what training
  holds live;
- ``tuned``: rl8lite's defaults (``tune_malloc``: freed memory kept for reuse,
  which is faster and leaves the process larger), the resident memory a user sees;
- ``glibc``: ``tune_malloc=False``, glibc's own defaults.

The resident peaks (``tuned``, ``glibc``) depend on how glibc's heap fragments,
which differs from run to run: ``--repeats`` measures each size in that many
fresh processes and reports min / median / max.

Linux only (reads ``/proc/self/status``).

Usage:
    python benchmarks/memory.py                          # 8, 256, 1024, 4096, 16384 envs
    python benchmarks/memory.py --envs 4096 --update-chunk-size 1024
    python benchmarks/memory.py --envs 65536 --malloc tuned --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from provenance import write_results

MIB = 2**20


def resident_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure(num_envs: int, chunk: int | None, tune_malloc: bool) -> dict[str, Any]:
    """Runs in its own process (see ``main``)."""
    import torch

    from rl8lite import Algorithm
    from rl8lite.examples import CartPole

    sys.path.insert(0, str(Path(__file__).parent))
    from throughput import CONFIG

    torch.set_num_threads(1)
    options: dict[str, Any] = {"tune_malloc": tune_malloc}
    if chunk is not None:
        options["update_chunk_size"] = chunk
    # Page in the code and lazily built kernels first, so that only data is counted.
    warm = Algorithm(CartPole, num_envs=8, seed=0, **{**CONFIG, "tune_malloc": tune_malloc})
    warm.collect()
    warm.step()
    del warm
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current VmRSS
    before = resident_kib("VmRSS")
    algo = Algorithm(CartPole, num_envs=num_envs, seed=0, **{**CONFIG, **options})
    peak = 0
    transient = {"collect": 0, "update": 0}
    for _ in range(3):
        for phase, run in (("collect", algo.collect), ("update", algo.step)):
            start = resident_kib("VmRSS")
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            run()
            high = resident_kib("VmHWM")
            transient[phase] = max(transient[phase], (high - start) * 1024)
            peak = max(peak, (high - before) * 1024)
    stats = algo.memory_stats()
    held = stats["memory/buffer_bytes"] + stats["memory/model_bytes"] + stats["memory/optimizer_bytes"]
    steps = num_envs * (algo.hparams.horizon + 1)
    return {
        "num_envs": num_envs, "update_chunk_size": algo.update_chunk_samples,
        "buffer_bytes": stats["memory/buffer_bytes"], "model_bytes": stats["memory/model_bytes"],
        "optimizer_bytes": stats["memory/optimizer_bytes"], "held_bytes": held, "peak_bytes": peak,
        "peak_over_held": peak / held, "collect_transient_bytes": transient["collect"],
        "update_transient_bytes": transient["update"], "buffer_bytes_per_env_step": stats["memory/buffer_bytes"] / steps,
    }


#: ``--malloc`` choices: (environment variables, rl8lite's ``tune_malloc``).
MALLOC_MODES: dict[str, tuple[dict[str, str], bool]] = {
    # glibc keeps freed blocks below its (self-raising) mmap threshold in the heap, where
    # the high-water mark would count them twice: return large blocks at once (a MALLOC_*
    # setting also makes rl8lite leave malloc alone, see rl8lite.runtime.memory).
    "live": ({"MALLOC_MMAP_THRESHOLD_": "65536"}, True),
    "tuned": ({}, True),
    "glibc": ({}, False),
}


def spread(values: list[float]) -> str:
    """min / median / max (just the value for one repeat)."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    ordered = sorted(values)
    return f"{ordered[0]:.2f} / {statistics.median(ordered):.2f} / {ordered[-1]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 256, 1024, 4096, 16384])
    parser.add_argument("--update-chunk-size", type=int, default=None)
    parser.add_argument("--malloc", choices=sorted(MALLOC_MODES), default="live",
                        help="allocator settings of the workers (see above; default: live)")
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per env count")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--no-tune-malloc", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(measure(args.worker, args.update_chunk_size, not args.no_tune_malloc)))
        return
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    variables, tune_malloc = MALLOC_MODES[args.malloc]
    print(f"CartPole at rl8's defaults (2x256 MLPs, horizon 32), 3 iterations, malloc {args.malloc!r},"
          f" {args.repeats} process(es) per size; MiB (medians; peak/held min / median / max)\n")
    header = (f"{'envs':>6} | {'chunk':>6} | {'buffer':>8} {'model':>6} {'optim':>6} {'held':>8} | {'peak':>8}"
              f" {'peak/held':>20} | {'collect+':>8} {'update+':>8} | {'buffer B/env/step':>17}")
    print(header)
    print("-" * len(header))
    rows = []
    for num_envs in args.envs:
        command = [sys.executable, __file__, "--worker", str(num_envs)]
        if args.update_chunk_size is not None:
            command += ["--update-chunk-size", str(args.update_chunk_size)]
        if not tune_malloc:
            command.append("--no-tune-malloc")
        env = {**os.environ, **variables}
        repeats = []
        for _ in range(args.repeats):
            done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
            repeats.append(json.loads(done.stdout.strip().splitlines()[-1]))
        r = {key: statistics.median(x[key] for x in repeats) for key in repeats[0]}
        r.update(malloc=args.malloc, peak_over_held_repeats=[x["peak_over_held"] for x in repeats])
        rows.append(r)
        print(f"{num_envs:>6} | {r['update_chunk_size']:>6.0f} | {r['buffer_bytes'] / MIB:>8.1f}"
              f" {r['model_bytes'] / MIB:>6.2f} {r['optimizer_bytes'] / MIB:>6.2f} {r['held_bytes'] / MIB:>8.1f} |"
              f" {r['peak_bytes'] / MIB:>8.1f} {spread(r['peak_over_held_repeats']):>20} |"
              f" {r['collect_transient_bytes'] / MIB:>8.1f} {r['update_transient_bytes'] / MIB:>8.1f} |"
              f" {r['buffer_bytes_per_env_step']:>17.0f}",
              flush=True)
    if args.json:
        write_results(args.json, {"results": rows})


if __name__ == "__main__":
    main()
