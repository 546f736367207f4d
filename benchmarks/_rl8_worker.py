"""Runs inside rl8's venv: times rl8 full iterations on request (one JSON line each).

Protocol on stdin, one request per line: ``<num_envs> <iterations>``; answers
``{"seconds": ...}``. The first request for a size builds the algorithm and
warms it up (one collect + step) before timing.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from rl8 import Algorithm, AlgorithmConfig
from rl8_cartpole import RL8CartPole

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
algorithms: dict[int, Algorithm] = {}
for line in sys.stdin:
    num_envs, iterations = map(int, line.split())
    if num_envs not in algorithms:
        torch.manual_seed(0)
        algorithms[num_envs] = algo = Algorithm(RL8CartPole, AlgorithmConfig(num_envs=num_envs, device="cpu"))
        algo.collect()
        algo.step()
    algo = algorithms[num_envs]
    start = time.perf_counter()
    for _ in range(iterations):
        algo.collect()
        algo.step()
    print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)
