"""Runs inside rl8's venv: rl8's own CartPole example at rl8's defaults, timed.

``Algorithm(RL8CartPole, AlgorithmConfig(horizon=64, device="cpu"))`` as in
rl8's ``examples/cartpole/__main__.py`` (8192 envs by default), for up to
``steps`` collect + update iterations; one JSON line per collect with the
training ``returns/mean`` and the seconds from building the algorithm to the
end of that collect.
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

threads, steps, seed = (int(a) for a in sys.argv[1:4])
torch.set_num_threads(threads)
torch.manual_seed(seed)
start = time.perf_counter()
algo = Algorithm(RL8CartPole, AlgorithmConfig(horizon=64, device="cpu"))
horizon = algo.hparams.horizon
for step in range(1, steps + 1):
    stats = algo.collect()
    seconds = time.perf_counter() - start  # the collect that shows the returns (as for rl8lite)
    print(json.dumps({"step": step, "returns/mean": stats["returns/mean"],
                      "env_steps": step * algo.hparams.num_envs * horizon, "seconds": seconds}), flush=True)
    algo.step()
