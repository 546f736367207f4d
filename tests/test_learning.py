"""Learning: the tuned example configs solve their envs on CPU within a stated env-step budget.

"Solved" is what a user reads in the run: ``episodes/return_mean``, the mean return of the
last 100 completed training episodes (at least ``WINDOW`` of them), reaches the threshold.
Each test then checks the deterministic policy too, with ``Algorithm.evaluate``.
"""

from __future__ import annotations

import pytest

from rl8lite import Algorithm
from rl8lite.distributions import Normal
from rl8lite.env import gymnasium_env
from rl8lite.examples import CartPole, Pendulum
from rl8lite.examples.configs import ACROBOT, CARTPOLE, PENDULUM

WINDOW = 20  # episodes (at least) in the mean that must reach the threshold


def train_until(algo: Algorithm, threshold: float, budget: int) -> tuple[int, float]:
    """Collect and update until the mean return of the last 100 episodes reaches ``threshold``
    or ``budget`` env steps are spent; return (env steps, last mean)."""
    steps, episodes, mean = 0, 0.0, float("nan")
    while steps < budget:
        stats = algo.collect()
        steps += int(stats["env/steps"])
        episodes += stats["episodes/count"]
        mean = stats["episodes/return_mean"]
        if episodes >= WINDOW and mean >= threshold:
            return steps, mean
        algo.step()
    return steps, mean


def deterministic_return(algo: Algorithm) -> float:
    """Mean episode return of the deterministic policy, evaluated over its longest episode."""
    stats = algo.evaluate()
    assert stats["episodes/count"] > 0
    return stats["episodes/return_mean"]


@pytest.mark.slow
def test_cartpole_solves_within_budget() -> None:
    budget = 100_000  # measured: 60k and 57k (seeds 0, 1) to a 100-episode mean of 475; SB3: ~200k
    algo = Algorithm(CartPole, seed=0, device="cpu", **CARTPOLE)
    steps, mean = train_until(algo, 475.0, budget)
    assert mean >= 475.0, (
        f"CartPole (CARTPOLE, seed 0) did not reach a mean episode return of 475 over the"
        f" last >= {WINDOW} episodes within {budget} env steps: {mean:.1f} after {steps} steps"
    )
    deterministic = deterministic_return(algo)
    assert deterministic >= 475.0, f"the deterministic CartPole policy returns {deterministic:.1f}"


@pytest.mark.slow
def test_pendulum_solves_within_budget() -> None:
    budget = 200_000  # measured: 77k (seeds 0, 1) to a 100-episode mean of -200; SB3: ~1M
    algo = Algorithm(Pendulum, seed=0, device="cpu", **PENDULUM)
    steps, mean = train_until(algo, -200.0, budget)
    assert mean >= -200.0, (
        f"Pendulum (PENDULUM, seed 0) did not reach a mean episode return of -200 over the"
        f" last >= {WINDOW} episodes within {budget} env steps: {mean:.1f} after {steps} steps"
    )
    deterministic = deterministic_return(algo)
    assert deterministic >= -200.0, f"the deterministic Pendulum policy returns {deterministic:.1f}"


@pytest.mark.slow
@pytest.mark.parametrize(("env_id", "config", "threshold", "budget"), [
    # rl-zoo's budgets for SB3 PPO; measured: CartPole-v1 32,768 and Acrobot-v1 11-29k for seeds 0-9
    ("CartPole-v1", CARTPOLE, 475.0, 100_000),
    ("Acrobot-v1", ACROBOT, -100.0, 1_000_000),
])
def test_gymnasium_envs_solve_within_rl_zoos_budgets(env_id: str, config: dict, threshold: float, budget: int) -> None:
    """Issue 18's criterion, the training episodes' mean return. The deterministic policy is not
    checked here: right at the solve it measured 462-500 on CartPole-v1 over seeds 0-2 (and
    293-500 on the torch-native CartPole), so seed 0 passing would be luck, not a property."""
    pytest.importorskip("gymnasium")
    algo = Algorithm(gymnasium_env(env_id), seed=0, device="cpu", **config)
    try:
        steps, mean = train_until(algo, threshold, budget)
        assert mean >= threshold, (
            f"{env_id} (seed 0) did not reach a mean episode return of {threshold} over the last"
            f" >= {WINDOW} episodes within {budget} env steps: {mean:.1f} after {steps} steps"
        )
    finally:
        algo.close()


@pytest.mark.slow
def test_a_mujoco_task_learns_with_normalised_observations_within_budget() -> None:
    """InvertedPendulum-v5 (MuJoCo), CleanRL-like settings with ``normalize_observations``.
    Measured at 49k env steps, seeds 0-2: 100-episode means 428, 383, 417 (episodes run up to
    1000 steps, so the 100-episode window lags the policy), deterministic returns 1000 from 16-32k
    steps on; 50k steps take about 6 s on one core."""
    pytest.importorskip("mujoco")
    config = {"num_envs": 8, "horizon": 128, "sgd_minibatch_size": 256, "num_sgd_iters": 10,
              "optimizer_config": {"lr": 1e-3}, "max_grad_norm": 0.5, "distribution_cls": Normal,
              "normalize_observations": True}
    algo = Algorithm(gymnasium_env("InvertedPendulum-v5", seed=0), seed=0, device="cpu", **config)
    try:
        steps, mean = train_until(algo, 1000.0, 50_000)
        assert mean >= 300.0, f"InvertedPendulum-v5 (seed 0): 100-episode mean {mean:.1f} at {steps} steps"
        assert algo.policy.normalizer.count_0 > 0
        deterministic = deterministic_return(algo)
        assert deterministic >= 950.0, f"the deterministic InvertedPendulum policy returns {deterministic:.1f}"
    finally:
        algo.close()
