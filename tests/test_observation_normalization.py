"""Observation normalisation in the policy: running moments, what collect and update see,
checkpoints, export, bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl8lite import Algorithm, ConfigError, RecurrentAlgorithm, Trainer
from rl8lite.algorithms.rollout import NonFiniteError
from rl8lite.data import DataKeys
from rl8lite.env import DiscreteDummyEnv
from rl8lite.examples import Pendulum
from rl8lite.nn.normalization import ObservationNormalizer
from rl8lite.specs import Categorical, Composite, Unbounded
from rl8lite.tracking import save_policy_model

from .helpers import MaskedChoice, bad_env


def test_running_moments_equal_those_of_every_row_seen() -> None:
    generator = torch.Generator().manual_seed(0)
    normalizer = ObservationNormalizer(Unbounded(3))
    batches = [1e3 + torch.randn(n, 3, generator=generator) * torch.tensor([1e-3, 1.0, 50.0])
               for n in (5, 1, 64, 17)]
    for batch in batches:
        normalizer.update(batch)
    rows = torch.cat(batches).double()
    torch.testing.assert_close(normalizer.mean_0, rows.mean(0), rtol=1e-12, atol=0)
    torch.testing.assert_close(normalizer.var_0, rows.var(0, correction=0), rtol=1e-9, atol=0)
    assert normalizer.count_0.item() == len(rows)
    x = batches[0]
    shift, scale = rows.mean(0).float(), (rows.var(0, correction=0) + 1e-8).rsqrt().float()
    assert torch.equal(normalizer(x), ((x - shift) * scale).clamp(-10, 10))  # in the obs dtype
    assert normalizer(torch.full((1, 3), 1e6)).max() == 10.0  # clipped


def test_only_float_entries_are_normalised_and_window_padding_stays_zero() -> None:
    spec = Composite(position=Unbounded(2), count=Categorical(5, shape=[1]),
                     action_mask=Categorical(2, shape=[4], dtype=torch.bool))
    normalizer = ObservationNormalizer(spec)
    assert normalizer.keys() == ["obs.position"]
    rows = TensorDict({"position": torch.tensor([[1.0, 10.0], [3.0, 30.0]]),
                       "count": torch.tensor([[1], [4]]),
                       "action_mask": torch.tensor([[True, False, True, True]] * 2)}, batch_size=[2])
    normalizer.update(rows)
    out = normalizer(rows)
    assert torch.equal(out["position"], torch.tensor([[-1.0, -1.0], [1.0, 1.0]]))
    assert torch.equal(out["count"], rows["count"]) and torch.equal(out["action_mask"], rows["action_mask"])
    window = TensorDict({DataKeys.INPUTS: torch.tensor([3.0, 30.0]).expand(2, 3, 2),
                         DataKeys.PADDING_MASK: torch.tensor([[True, False, False]] * 2)}, batch_size=[2])
    normalized = normalizer._normalize(window, 0)[DataKeys.INPUTS]
    assert (normalized[:, 0] == 0).all() and (normalized[:, 1:] == 1).all()


class CountingEnv(DiscreteDummyEnv):
    """Integer observations only."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.observation_spec = Composite(count=Categorical(5, shape=[1]), level=Categorical(3, shape=[1]))


def test_integer_only_observations_are_refused_naming_their_keys() -> None:
    with pytest.raises(ConfigError, match=r"no float entry.*'obs\.count', 'obs\.level'"):
        Algorithm(CountingEnv, num_envs=2, horizon=2, normalize_observations=True)
    with pytest.raises(ConfigError, match="observation_clip"):
        Algorithm(Pendulum, num_envs=2, horizon=2, normalize_observations=True, observation_clip=0.0)


@pytest.mark.parametrize("algorithm_cls, extra", [(Algorithm, {}), (RecurrentAlgorithm, {"seq_len": 4})])
def test_a_collect_and_the_update_after_it_see_the_same_statistics(algorithm_cls: type, extra: dict) -> None:
    # with a learning rate of ~0 the first pass's ratio is exactly 1 unless the statistics moved
    algo = algorithm_cls(Pendulum, num_envs=8, horizon=16, seed=0, normalize_observations=True,
                         optimizer_config={"lr": 1e-30}, num_sgd_iters=1, **extra)
    for _ in range(3):
        algo.collect()
        stats = algo.step()
        assert stats["monitors/kl_div"] < 1e-12 and stats["monitors/clip_fraction"] == 0.0
    normalizer = algo.policy.normalizer
    assert normalizer.count_0.item() == 3 * 8 * 16
    assert normalizer.var_0[2] > 1.0  # Pendulum's angular velocity: the statistics are real
    frozen = {k: v.clone() for k, v in normalizer.state_dict().items()}
    algo.evaluate()
    assert all(torch.equal(v, normalizer.state_dict()[k]) for k, v in frozen.items())


def test_resume_with_normalisation_is_exact(experiment_name: str) -> None:
    def make() -> Trainer:
        algo = Algorithm(Pendulum, num_envs=8, horizon=8, seed=3, normalize_observations=True)
        return Trainer(algo, experiment_name=experiment_name, progress=False, save_policy=False)

    straight = make()
    for _ in range(4):
        straight.step()
    first = make()
    for _ in range(2):
        first.step()
    path = first.save_checkpoint()
    first.close()
    resumed = Trainer.from_checkpoint(path, progress=False, save_policy=False)
    for _ in range(2):
        resumed.step()
    want, got = straight.algorithm.policy.state_dict(), resumed.algorithm.policy.state_dict()
    assert [k for k in got if k.startswith("normalizer.")] == [f"normalizer.{n}_0" for n in
                                                             ("count", "mean", "var", "shift", "scale")]
    assert all(torch.equal(want[k], got[k]) for k in want)
    straight.close()
    resumed.close()


@pytest.mark.parametrize("env_cls", [Pendulum, MaskedChoice])
def test_the_exported_model_takes_raw_observations(env_cls: type, tmp_path: Path) -> None:
    algo = Algorithm(env_cls, num_envs=8, horizon=8, seed=0, normalize_observations=True)
    for _ in range(2):
        algo.collect()
        algo.step()
    save_policy_model(algo.policy, algo.env.observation_spec, tmp_path / "policy")
    model = mlflow.pyfunc.load_model(str(tmp_path / "policy"))
    raw = algo.buffer[DataKeys.OBS][:, :8].flatten(0, 1)
    with torch.no_grad():
        expected = algo.policy.act(raw, deterministic=True)[0]
        unnormalized = algo.policy.distribution(algo.policy.network(raw)[0], raw).deterministic_sample()
    assert not torch.equal(expected.float(), unnormalized.float())  # normalisation changes actions
    model_input = raw.numpy() if isinstance(raw, torch.Tensor) else {k: v.numpy() for k, v in raw.items()}
    np.testing.assert_allclose(model.predict(model_input), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_a_non_finite_observation_stops_training_naming_it_and_writes_no_checkpoint(experiment_name: str) -> None:
    algo = Algorithm(bad_env("nan_obs", at_step=6), num_envs=4, horizon=3, horizons_per_env_reset=-1,
                     normalize_observations=True)
    trainer = Trainer(algo, experiment_name=experiment_name, progress=False, save_policy=False)
    with pytest.raises(NonFiniteError, match="non-finite 'obs'"):
        trainer.run(checkpoint_every=1)
    files = sorted(trainer.tracker.checkpoint_dir.glob("checkpoint-*.pt"))
    assert files[-1].name == "checkpoint-000000000024.pt"  # the last good step (2)
    assert algo.policy.normalizer.count_0.item() == 2 * 4 * 3
    assert algo.policy.normalizer.mean_0.isfinite().all()


def test_moments_too_large_for_float64_are_refused_and_leave_the_statistics_as_they_were() -> None:
    normalizer = ObservationNormalizer(Composite(a=Unbounded(1, dtype=torch.float64), b=Unbounded(1, dtype=torch.float64)))
    normalizer.update(TensorDict({"a": torch.ones(2, 1, dtype=torch.float64), "b": torch.ones(2, 1, dtype=torch.float64)}, [2]))
    before = {k: v.clone() for k, v in normalizer.state_dict().items()}
    huge = TensorDict({"a": torch.ones(2, 1, dtype=torch.float64), "b": torch.full((2, 1), 1e200, dtype=torch.float64)}, [2])
    with pytest.raises(ValueError, match="obs.b are not finite"):
        normalizer.update(huge)
    assert all(torch.equal(v, normalizer.state_dict()[k]) for k, v in before.items())
