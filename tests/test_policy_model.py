"""The trained policy as an MLflow model: vector and dict observations, recurrent state, sampling."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl8lite import Algorithm, RecurrentAlgorithm, Trainer
from rl8lite.conditions import HitsUpperBound
from rl8lite.examples import CartPole, Pendulum
from rl8lite.tracking import save_policy_model
from rl8lite.tracking.export import ExportError

from .helpers import CueRecall, MaskedChoice

RNG = np.random.default_rng(0)


def saved(algo: Algorithm, tmp_path: Path) -> Any:
    path = tmp_path / "policy"
    save_policy_model(algo.policy, algo.env.observation_spec, path)
    return mlflow.pyfunc.load_model(str(path))


def masked_obs(batch: int) -> dict[str, np.ndarray]:
    mask = RNG.random((batch, 4)) < 0.5
    mask[np.arange(batch), RNG.integers(0, 4, batch)] = True  # at least one allowed action
    return {"position": RNG.normal(size=(batch, 2)).astype(np.float32), "action_mask": mask}


def test_vector_observations_give_the_deterministic_actions_and_sample_on_request(tmp_path: Path) -> None:
    algo = Algorithm(Pendulum, num_envs=4, horizon=4, seed=0)
    model = saved(algo, tmp_path)
    obs = RNG.normal(size=(7, 3)).astype(np.float32)
    with torch.no_grad():
        expected = algo.policy.act(torch.from_numpy(obs), deterministic=True)[0].numpy()
    actions = model.predict(obs)
    assert actions.shape == expected.shape == (7, 1)
    np.testing.assert_allclose(actions, expected, rtol=1e-6)
    sampled = model.predict(obs, params={"deterministic": False})
    assert not np.allclose(sampled, actions)
    low, high = algo.env.action_spec.low.numpy(), algo.env.action_spec.high.numpy()
    assert ((sampled >= low) & (sampled <= high)).all()
    np.testing.assert_allclose(model.predict(obs[:1]), expected[:1], rtol=1e-6)  # batch of one


def test_dict_observations_with_an_action_mask(tmp_path: Path) -> None:
    algo = Algorithm(MaskedChoice, num_envs=4, horizon=4, seed=0)
    model = saved(algo, tmp_path)
    obs = masked_obs(64)
    with torch.no_grad():
        td = TensorDict({k: torch.from_numpy(v) for k, v in obs.items()}, batch_size=[64])
        expected = algo.policy.act(td, deterministic=True)[0].numpy()
    actions = model.predict(obs)
    np.testing.assert_array_equal(actions, expected)
    for deterministic in (True, False):
        taken = model.predict(obs, params={"deterministic": deterministic})
        assert np.take_along_axis(obs["action_mask"], taken, axis=1).all(), "a masked action was served"
    assert list(model.input_example) == ["position", "action_mask"]  # one input per key
    with pytest.raises(mlflow.exceptions.MlflowException, match="action_mask"):
        model.predict({"position": obs["position"]})
    with pytest.raises(ValueError, match=r"same number of rows .*'position': 3, 'action_mask': 2"):
        model.predict({"position": obs["position"][:3], "action_mask": obs["action_mask"][:2]})


def test_any_real_dtype_is_cast_to_the_inputs_and_other_inputs_are_refused_by_name(tmp_path: Path) -> None:
    model = saved(Algorithm(MaskedChoice, num_envs=4, horizon=4, seed=0), tmp_path)
    obs = masked_obs(8)
    expected = model.predict(obs)
    widened = {"position": obs["position"].astype(np.float64), "action_mask": obs["action_mask"].astype(np.int64)}
    np.testing.assert_array_equal(model.predict(widened), expected)
    with pytest.raises(mlflow.exceptions.MlflowException, match="'position'.* dtype <U"):
        model.predict({**obs, "position": obs["position"].astype(str)})
    with pytest.raises(mlflow.exceptions.MlflowException, match=r"'position' .*\[-1, 2\].* \[8, 3\]"):
        model.predict({**obs, "position": np.zeros((8, 3))})
    vector = saved(Algorithm(Pendulum, num_envs=4, horizon=4, seed=0), tmp_path / "vector")
    obs = RNG.normal(size=(5, 3))  # numpy's default float64
    np.testing.assert_array_equal(vector.predict(obs), vector.predict(obs.astype(np.float32)))
    np.testing.assert_array_equal(vector.predict(np.ones((5, 3), dtype=np.int64)),
                                  vector.predict(np.ones((5, 3), dtype=np.float32)))


class NestedMasked(MaskedChoice):
    """Nested dict observations with an int64 0/1 action mask (torchrl's default Categorical dtype)."""

    def __init__(self, num_envs: int, /, horizon: int | None = None, **kwargs: Any) -> None:
        from rl8lite.specs import Categorical, Composite, Unbounded

        super().__init__(num_envs, horizon, **kwargs)
        self.observation_spec = Composite(
            sensors=Composite(position=Unbounded(2), speed=Unbounded(1)),
            action_mask=Categorical(2, shape=[4]),
        )


def test_nested_dict_observations_one_input_per_leaf_and_batches_of_one(tmp_path: Path) -> None:
    algo = Algorithm(NestedMasked, num_envs=4, horizon=4, seed=0)
    model = saved(algo, tmp_path)
    assert list(model.input_example) == ["sensors.position", "sensors.speed", "action_mask"]
    for batch in (1, 9):
        mask = masked_obs(batch)["action_mask"].astype(np.int64)
        obs = {"sensors.position": RNG.normal(size=(batch, 2)).astype(np.float32),
               "sensors.speed": RNG.normal(size=(batch, 1)).astype(np.float32), "action_mask": mask}
        td = TensorDict({"sensors": {"position": torch.from_numpy(obs["sensors.position"]),
                                     "speed": torch.from_numpy(obs["sensors.speed"])},
                         "action_mask": torch.from_numpy(mask)}, batch_size=[batch])
        with torch.no_grad():
            expected = algo.policy.act(td, deterministic=True)[0].numpy()
        actions = model.predict(obs)
        np.testing.assert_array_equal(actions, expected)
        assert np.take_along_axis(mask, actions, axis=1).all()
    with pytest.raises(TypeError, match="not recurrent"):
        model.unwrap_python_model().initial_state(2)


def test_a_key_with_a_dot_is_refused_by_name(tmp_path: Path) -> None:
    from rl8lite.specs import Composite, Unbounded

    algo = Algorithm(MaskedChoice, num_envs=4, horizon=4, seed=0)
    spec = Composite({"position": Unbounded(2), "a.b": Unbounded(1)})
    with pytest.raises(ExportError, match="observation key 'a.b' contains '.'"):
        save_policy_model(algo.policy, spec, tmp_path / "policy")


def test_recurrent_policy_takes_and_returns_its_state(tmp_path: Path) -> None:
    algo = RecurrentAlgorithm(CueRecall, num_envs=4, horizon=8, seq_len=4, seed=0)
    model = saved(algo, tmp_path)
    state = model.unwrap_python_model().initial_state(3)
    expected_state = torch.zeros(3, algo.policy.model.state_size)
    assert state.shape == tuple(expected_state.shape) and state.dtype == np.float32
    for _ in range(4):
        obs = RNG.normal(size=(3, 2)).astype(np.float32)
        out = model.predict({"obs": obs, "recurrent_state": state})
        with torch.no_grad():
            actions, _, _, expected_state = algo.policy.act_recurrent(
                torch.from_numpy(obs), expected_state, deterministic=True
            )
        np.testing.assert_array_equal(out["actions"], actions.numpy())
        np.testing.assert_allclose(out["recurrent_state"], expected_state.numpy(), rtol=1e-5, atol=1e-6)
        state = out["recurrent_state"]
    assert np.abs(state).sum() > 0
    one = model.predict({"obs": RNG.normal(size=(1, 2)).astype(np.float32), "recurrent_state": state[:1]})
    assert one["actions"].shape == (1, 1) and one["recurrent_state"].shape == (1, state.shape[1])


@pytest.mark.slow
def test_a_served_recurrent_policy_recalls_the_cue_only_with_its_state(tmp_path: Path) -> None:
    algo = RecurrentAlgorithm(CueRecall, num_envs=64, horizon=16, seq_len=4, seqs_per_state_reset=-1, seed=0,
                              horizons_per_env_reset=-1, gamma=0.9, optimizer_config={"lr": 3e-3},
                              sgd_minibatch_size=256)
    for _ in range(30):
        algo.collect()
        algo.step()
    model = saved(algo, tmp_path)

    def served_return(carry_state: bool) -> float:
        env = CueRecall(256)
        obs, state, total = env.reset(), model.unwrap_python_model().initial_state(256), 0.0
        for _ in range(4 * (env.delay + 1)):
            out = model.predict({"obs": obs.numpy(), "recurrent_state": state})
            step = env.step(torch.from_numpy(out["actions"]))
            if carry_state:  # ... and zeroed where an episode ended, as in training
                state = out["recurrent_state"] * ~step["terminated"].numpy()
            obs, total = step["obs"], total + float(step["rewards"].sum())
        return total / (4 * 256)  # mean return per episode; 1.0 is perfect recall

    assert served_return(carry_state=True) > 0.9
    assert abs(served_return(carry_state=False)) < 0.3


def test_loading_needs_no_rl8lite(tmp_path: Path) -> None:
    algo = Algorithm(MaskedChoice, num_envs=4, horizon=4, seed=0)
    saved(algo, tmp_path)
    obs = masked_obs(5)
    np.savez(tmp_path / "obs.npz", **obs)
    script = f"""
import sys
sys.modules["rl8lite"] = None  # any import of rl8lite now fails
import mlflow, numpy as np
obs = dict(np.load({str(tmp_path / "obs.npz")!r}))
print(mlflow.pyfunc.load_model({str(tmp_path / "policy")!r}).predict(obs).ravel().tolist())
"""
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    with torch.no_grad():
        td = TensorDict({k: torch.from_numpy(v) for k, v in obs.items()}, batch_size=[5])
        expected = algo.policy.act(td, deterministic=True)[0]
    assert done.stdout.strip().splitlines()[-1] == str(expected.ravel().tolist())


class UntraceableModel(torch.nn.Module):
    """Branches on data, which torch.export cannot trace."""

    def __init__(self, observation_spec: Any, action_spec: Any, /) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.linear(obs) if obs.sum() > 0 else -self.linear(obs)
        return out[:, :2], out[:, 2:]


def test_run_warns_and_finishes_when_the_model_cannot_be_exported(
    experiment_name: str, client: mlflow.MlflowClient, tmp_path: Path
) -> None:
    algo = Algorithm(CartPole, num_envs=4, horizon=4, seed=0, model_cls=UntraceableModel)
    with pytest.raises(ExportError, match="UntraceableModel"):
        save_policy_model(algo.policy, algo.env.observation_spec, tmp_path / "policy")
    assert not (tmp_path / "policy").exists()
    trainer = Trainer(algo, experiment_name=experiment_name, progress=False)
    with pytest.warns(RuntimeWarning, match="not saved as an MLflow model.*UntraceableModel.*the weights are in") as w:
        trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 1)])
    assert client.get_run(trainer.tracker.run_id).info.status == "FINISHED"
    checkpoint = str(w[0].message).rsplit("the checkpoint ", 1)[1]
    resumed = Trainer.from_checkpoint(checkpoint, progress=False, save_policy=False)
    for got, want in zip(resumed.algorithm.policy.parameters(), algo.policy.parameters()):
        torch.testing.assert_close(got, want)
    resumed.close()


def test_a_trained_dict_observation_policy_is_logged_to_its_run(experiment_name: str) -> None:
    algo = Algorithm(MaskedChoice, num_envs=8, horizon=4, seed=0)
    trainer = Trainer(algo, experiment_name=experiment_name, progress=False)
    trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 2)])
    model = mlflow.pyfunc.load_model(f"runs:/{trainer.tracker.run_id}/policy")
    obs = masked_obs(16)
    assert np.take_along_axis(obs["action_mask"], model.predict(obs), axis=1).all()


def test_cli_save_reports_an_untraceable_model_before_training(
    tmp_path: Path, experiment_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from rl8lite.cli import main

    config = tmp_path / "config.yaml"
    config.write_text(
        "env_cls: rl8lite.examples.CartPole\n"
        f"algorithm_config: {{num_envs: 4, horizon: 4, model_cls: {__name__}.UntraceableModel}}\n"
    )
    status = main(["train", "-f", str(config), "--max-steps", "16", "--save", str(tmp_path / "policy"),
                   "--experiment-name", experiment_name, "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith(
        "rl8lite: error: torch.export could not export UntraceableModel at test_policy_model.py:")
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "policy").exists()


def test_an_rl8_style_model_is_exported_through_its_adapter(tmp_path: Path) -> None:
    from .test_rl8_models import Rl8Style

    algo = Algorithm(CartPole, num_envs=4, horizon=4, seed=0, model_cls=Rl8Style)
    model = saved(algo, tmp_path)
    obs = RNG.normal(size=(5, 4)).astype(np.float32)
    with torch.no_grad():
        expected = algo.policy.act(torch.from_numpy(obs), deterministic=True)[0]
    np.testing.assert_array_equal(model.predict(obs), expected.numpy())


def test_a_model_that_sees_windows_is_not_exported_and_says_why(tmp_path: Path) -> None:
    from .test_windowed import Stacked

    algo = Algorithm(CartPole, num_envs=4, horizon=4, seed=0, model_cls=Stacked, model_config={"window": True})
    with pytest.raises(ExportError, match=r"Stacked sees windows of past observations \['obs'\] .* cannot be exported yet"):
        save_policy_model(algo.policy, algo.env.observation_spec, tmp_path / "policy")
