"""Tuned hyperparameters for the example envs (measured in benchmarks/solve.py)."""

from __future__ import annotations

from typing import Any

#: CartPole on CPU: solves (mean episode return >= 475) in ~100-200k env steps.
CARTPOLE: dict[str, Any] = {
    "num_envs": 64,
    "horizon": 32,
    "optimizer_config": {"lr": 3e-3},
    "sgd_minibatch_size": 1024,
}

PENDULUM: dict[str, Any] = {
    "num_envs": 256,
    "horizon": 50,
}
