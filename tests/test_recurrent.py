"""Recurrent policies: the same collect/update path with an LSTM state carried."""

from __future__ import annotations

import math

import pytest
import torch

from rl8lite import (
    Algorithm,
    ConfigError,
    RecurrentAlgorithm,
    RecurrentAlgorithmConfig,
    RecurrentTrainer,
)
from rl8lite.data import DataKeys
from rl8lite.examples import CartPole

from .helpers import CueRecall

COMMON = {"num_envs": 64, "horizon": 16, "seed": 0, "horizons_per_env_reset": -1, "gamma": 0.9,
              "optimizer_config": {"lr": 3e-3}, "sgd_minibatch_size": 256}


def mean_recent_return(algo: Algorithm, updates: int) -> float:
    history = []
    for _ in range(updates):
        history.append(algo.collect()["episodes/return_mean"])
        algo.step()
    return sum(history[-5:]) / 5


@pytest.mark.slow
def test_a_recurrent_policy_learns_a_memory_task_a_feedforward_one_cannot() -> None:
    # The cue is visible only at an episode's first step; the last step asks for it.
    recurrent = RecurrentAlgorithm(CueRecall, seq_len=4, seqs_per_state_reset=-1, **COMMON)
    feedforward = Algorithm(CueRecall, **COMMON)
    assert mean_recent_return(recurrent, 30) > 0.9  # of a best possible 1.0
    assert abs(mean_recent_return(feedforward, 30)) < 0.3  # guessing: 0 on average


def test_state_is_reset_per_copy_at_episode_ends_and_stored_per_sequence() -> None:
    algo = RecurrentAlgorithm(CueRecall, num_envs=3, horizon=8, seq_len=4, seqs_per_state_reset=-1, seed=0)
    algo.collect()
    # every copy's episode (4 steps) ended at t = 7: states are zero for the next collect,
    # and the stored state at the second sequence start (t = 4, after an episode end) too
    assert torch.count_nonzero(algo.recurrence.states) == 0
    assert torch.count_nonzero(algo.recurrence.sequence_states[:, 1]) == 0
    algo.step()
    periodic = RecurrentAlgorithm(CartPole, num_envs=2, horizon=8, seq_len=2, seqs_per_state_reset=2, seed=0)
    periodic.collect()
    stored = periodic.recurrence.sequence_states
    assert torch.count_nonzero(stored[:, 0]) == 0 and torch.count_nonzero(stored[:, 2]) == 0
    assert torch.count_nonzero(stored[:, 1]) > 0 and torch.count_nonzero(stored[:, 3]) > 0


@pytest.mark.parametrize("in_rollout", [True, False], ids=["valued-in-rollout", "states-kept"])
@pytest.mark.parametrize("collect_chunk_size", [None, 4])
def test_truncated_copies_bootstrap_from_final_obs_with_the_carried_state(
    collect_chunk_size, in_rollout
) -> None:
    # On the CPU the truncated copies' final_obs are valued during the rollout; elsewhere
    # (no host sync per step) every state is kept and valued after it: both must agree.
    algo = RecurrentAlgorithm(CartPole, num_envs=6, horizon=12, seq_len=4, seqs_per_state_reset=-1,
                              env_config={"max_episode_steps": 5}, collect_chunk_size=collect_chunk_size, seed=0)
    algo.recurrence.value_final_obs_in_rollout = in_rollout
    algo.collect()
    assert (algo.recurrence.final_states is None) == in_rollout
    buf, model = algo.buffer, algo.policy.model
    truncated = buf[DataKeys.TRUNCATED][:, :12, 0]
    ends = truncated | buf[DataKeys.TERMINATED][:, :12, 0]
    assert truncated.any()
    # Replay the rollout from the buffer: V(final_obs_t) continues from the state after obs_t.
    expected = torch.full((6, 12), float("nan"))
    states = model.init_states(6, algo.device)
    with torch.no_grad():
        for t in range(12):
            _, _, states = model(buf[DataKeys.OBS][:, t], states)
            expected[:, t] = model(buf[DataKeys.FINAL_OBS][:, t], states)[1][:, 0]
            states = states * (~ends[:, t, None]).float()
    final_values = buf[DataKeys.FINAL_VALUES][:, :12, 0]
    torch.testing.assert_close(final_values[truncated], expected[truncated], rtol=1e-5, atol=1e-6)
    pre_step_values = buf[DataKeys.VALUES][:, :12, 0]
    assert not torch.allclose(final_values[truncated], pre_step_values[truncated])
    torch.testing.assert_close(final_values[~truncated], pre_step_values[~truncated])


def test_single_env_and_validate() -> None:
    algo = RecurrentAlgorithm(CartPole, num_envs=1, horizon=8, seq_len=4, sgd_minibatch_size=4, seed=0)
    algo.validate()
    for _ in range(2):
        algo.collect()
        assert not any(math.isnan(v) for v in algo.step().values())


def test_recurrent_resume_is_bit_identical(experiment_name: str, tmp_path) -> None:
    def make() -> RecurrentTrainer:
        algo = RecurrentAlgorithm(CartPole, num_envs=4, horizon=8, seq_len=4, seed=7)
        return RecurrentTrainer(algo, experiment_name=experiment_name, progress=False, save_policy=False)

    straight = make()
    reference = [straight.step() for _ in range(4)]
    first = make()
    first.step(), first.step()
    resumed = RecurrentTrainer.from_checkpoint(first.save_checkpoint(tmp_path / "r.pt"), progress=False)
    continued = [resumed.step() for _ in range(2)]
    volatile = ("profiling/", "throughput/", "memory/")
    strip = lambda stats: repr([{k: v for k, v in s.items() if not k.startswith(volatile)} for s in stats])
    assert isinstance(resumed.algorithm, RecurrentAlgorithm)
    assert strip(continued) == strip(reference[2:])
    for trainer in (straight, first, resumed):
        trainer.close()


def test_recurrent_config_is_validated() -> None:
    with pytest.raises(ConfigError, match="seq_len=3 must be a factor of horizon=8"):
        RecurrentAlgorithm(CartPole, num_envs=2, horizon=8, seq_len=3)
    with pytest.raises(ConfigError, match="sgd_minibatch_size=6 must be a multiple of seq_len=4"):
        RecurrentAlgorithmConfig(num_envs=2, horizon=8, seq_len=4, sgd_minibatch_size=6).validate()
    with pytest.raises(ConfigError, match="seqs_per_state_reset must be > 0 or < 0"):
        RecurrentAlgorithm(CartPole, num_envs=2, horizon=8, seqs_per_state_reset=0)
    with pytest.raises(TypeError, match="needs a RecurrentAlgorithmConfig"):
        RecurrentAlgorithm(CartPole, Algorithm(CartPole, num_envs=2).hparams)


def test_memory_stats_count_the_recurrent_states_and_the_cpu_keeps_no_state_per_step() -> None:
    algo = RecurrentAlgorithm(CartPole, num_envs=6, horizon=12, seq_len=4, seed=0,
                              env_config={"max_episode_steps": 5})
    algo.collect()
    assert algo.recurrence.final_states is None  # [N, T, state_size]: 2 * 64 floats per env step
    kept = algo.recurrence.final_obs_values_kept
    assert kept is not None and kept.shape == (6, 12, 1)
    extra = sum(t.numel() * t.element_size() for t in (algo.recurrence.states, algo.recurrence.sequence_states, kept))
    stats = algo.memory_stats()
    buffer = sum(t.numel() * t.element_size() for t in algo.buffer.values(include_nested=True, leaves_only=True))
    assert stats["memory/buffer_bytes"] == buffer + extra
