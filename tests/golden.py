"""Short seeded training runs whose exact results are pinned in ``tests/data/golden/``.

Each scenario builds an algorithm, runs a few collect + step iterations (and one
deterministic collect), and records every stat (timings and memory excepted),
the final parameters and optimizer state, and the torch RNG state.

Float results are exact only for one set of math kernels: torch and MKL pick theirs by
the CPU (AVX2 or AVX512, the vendor, bf16 instructions for autocast), so the results
are pinned per :func:`kernel_fingerprint`, one file each under ``tests/data/golden/``,
written by ``python -m tests.golden --write`` on such a machine. ``tests/test_golden.py``
checks a machine with its own pins bit for bit, and any other machine against the
first pinned file within float rounding (a few units in the 4th-6th digit after four
iterations). Regenerate the pins only for a change that is meant to alter results
(every file: a machine of each kind, or delete those that cannot be rewritten), and
say so in CHANGELOG.md.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rl8lite import Algorithm, RecurrentAlgorithm, RecurrentAlgorithmConfig
from rl8lite.env import ContinuousDummyEnv
from rl8lite.examples import CartPole, Pendulum

from .helpers import MaskedChoice, TinyModel

GOLDEN_DIR = Path(__file__).parent / "data" / "golden"
ITERATIONS = 4


def _cartpole() -> Algorithm:
    # Short episodes: truncations (final_obs) and terminations in every collect.
    return Algorithm(
        CartPole, num_envs=16, horizon=24, env_config={"max_episode_steps": 20}, seed=3,
        model_config={"hiddens": [16, 16]}, sgd_minibatch_size=96, update_chunk_size=40,
        collect_chunk_size=6, num_sgd_iters=3, target_kl_div=0.02, horizons_per_env_reset=2,
    )


def _pendulum() -> Algorithm:
    return Algorithm(
        Pendulum, num_envs=8, horizon=16, seed=5, model_config={"hiddens": [16]},
        sgd_minibatch_size=32, accumulate_grads=True, vf_clip_param=0.5, dual_clip_param=3.0,
        entropy_coeff_schedule=[(0, 0.01), (256, 0.0)], lr_schedule=[(0, 1e-3), (512, 1e-4)],
        lr_schedule_kind="interp", normalize_rewards=False, update_chunk_size=20,
    )


def _custom_model() -> Algorithm:
    # A model that is not separable: values come from every rollout step's forward.
    torch.manual_seed(7)  # the instance is built before the algorithm seeds the RNGs
    return Algorithm(
        ContinuousDummyEnv, num_envs=12, horizon=8, seed=7, model=TinyModel(
            ContinuousDummyEnv(1).observation_spec, ContinuousDummyEnv(1).action_spec
        ), sgd_minibatch_size=24, vf_loss="smooth_l1", vf_clip_param=5.0, max_grad_norm=0.5,
        entropy_coeff=0.01,
    )


def _masked() -> Algorithm:
    return Algorithm(MaskedChoice, num_envs=10, horizon=6, seed=11, sgd_minibatch_size=20,
                     model_config={"hiddens": [8]}, optimizer_config={"lr": 1e-2})


def _recurrent() -> Algorithm:
    config = RecurrentAlgorithmConfig(
        num_envs=10, horizon=16, seq_len=4, seqs_per_state_reset=2, seed=13,
        env_config={"max_episode_steps": 9}, model_config={"hiddens": [12]},
        sgd_minibatch_size=40, update_chunk_size=12, collect_chunk_size=4,
    )
    return RecurrentAlgorithm(CartPole, config)


def _amp() -> Algorithm:
    return Algorithm(CartPole, num_envs=8, horizon=16, seed=17, enable_amp=True,
                     model_config={"hiddens": [16]}, sgd_minibatch_size=64)


SCENARIOS: dict[str, Callable[[], Algorithm]] = {
    "cartpole": _cartpole,
    "pendulum_accumulated": _pendulum,
    "custom_model": _custom_model,
    "masked_dict_obs": _masked,
    "recurrent": _recurrent,
    "amp_bf16": _amp,
}


def kernel_fingerprint() -> str:
    """What selects the math kernels that float results depend on: torch's version, the
    architecture, the CPU vendor (MKL's code paths), torch's vector ISA and bf16 instructions.

    Examples:
        >>> kernel_fingerprint()  # doctest: +SKIP
        'torch-2.13.0_x86_64_GenuineIntel_AVX512_amx'
    """
    vendor, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "vendor_id":
                    vendor = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    bf16 = "amx" if "amx_bf16" in flags else ("avx512bf16" if "avx512_bf16" in flags else "")
    parts = [f"torch-{torch.__version__.split('+')[0]}", platform.machine(), vendor,
             torch.backends.cpu.get_cpu_capability(), bf16]
    return "_".join(p for p in parts if p)


def pinned_files() -> list[Path]:
    """The pinned results, one file per kernel fingerprint, in name order."""
    return sorted(GOLDEN_DIR.glob("*.pt"))


def _pinned(stats: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in stats.items() if not k.startswith(("profiling/", "memory/"))}


def run_scenario(name: str) -> dict[str, Any]:
    """Build scenario ``name``, train it briefly, and return what is pinned."""
    torch.set_num_threads(1)
    algo = SCENARIOS[name]()
    stats = []
    for _ in range(ITERATIONS):
        stats.append(_pinned(algo.collect()))
        stats.append(_pinned(algo.step()))
    stats.append(_pinned(algo.collect(deterministic=True)))
    optimizer = algo.optimizer.state_dict()["state"]
    return {
        "stats": stats,
        "params": {k: v.detach().clone() for k, v in algo.policy.state_dict().items()},
        "optimizer": {
            f"{i}.{key}": value.clone()
            for i, state in optimizer.items() for key, value in state.items()
            if isinstance(value, torch.Tensor)
        },
        "rng": torch.get_rng_state(),
    }


def main() -> None:
    import sys

    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python -m tests.golden --write  (overwrites the pinned results)")
    golden = {name: run_scenario(name) for name in SCENARIOS}
    path = GOLDEN_DIR / f"{kernel_fingerprint()}.pt"
    GOLDEN_DIR.mkdir(exist_ok=True)
    torch.save(golden, path)
    print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
