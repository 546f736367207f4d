"""The policy as ONNX: onnxruntime gives the policy's deterministic actions, normalisation included."""

from __future__ import annotations

from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
from tensordict import TensorDict

ort = pytest.importorskip("onnxruntime")

from rl8lite import Algorithm, RecurrentAlgorithm
from rl8lite.examples import Pendulum
from rl8lite.tracking.export import ExportError, export_onnx, log_onnx_model

from .helpers import MaskedChoice


def trained(algorithm_cls: type, env_cls: type) -> Algorithm:
    algo = algorithm_cls(env_cls, num_envs=8, horizon=8, seed=0, normalize_observations=True)
    for _ in range(2):
        algo.collect()
        algo.step()
    return algo


@pytest.mark.parametrize("algorithm_cls, env_cls", [(Algorithm, Pendulum), (Algorithm, MaskedChoice),
                                                    (RecurrentAlgorithm, Pendulum)])
def test_onnxruntime_gives_the_policys_deterministic_actions_from_raw_observations(
        tmp_path: Path, algorithm_cls: type, env_cls: type) -> None:
    algo = trained(algorithm_cls, env_cls)
    session = ort.InferenceSession(str(export_onnx(algo.policy, algo.env.observation_spec, tmp_path / "p.onnx")))
    raw = algo.buffer["obs"][:, :8].flatten(0, 1)  # raw observations; the normaliser's statistics are real
    feeds = {"obs": raw.numpy()} if isinstance(raw, torch.Tensor) else {k: v.numpy() for k, v in raw.items()}
    with torch.no_grad():
        if algo.policy.recurrent:
            states = torch.randn(len(raw), algo.policy.network.state_size)
            actions, _, _, next_states = algo.policy.act_recurrent(raw, states, deterministic=True)
            feeds["recurrent_state"] = states.numpy()
        else:
            actions = algo.policy.act(raw, deterministic=True)[0]
    outputs = session.run(None, feeds)
    np.testing.assert_allclose(outputs[0], actions.numpy(), rtol=1e-5, atol=1e-5)
    if algo.policy.recurrent:
        assert [o.name for o in session.get_outputs()] == ["actions", "next_recurrent_state"]
        np.testing.assert_allclose(outputs[1], next_states.numpy(), rtol=1e-5, atol=1e-5)
    if isinstance(raw, TensorDict):  # the action mask is an input and is obeyed
        assert [i.name for i in session.get_inputs()] == ["position", "action_mask"]
        assert np.take_along_axis(feeds["action_mask"], outputs[0].astype(np.int64), 1).all()


def test_a_policy_that_cannot_be_exported_is_an_export_error_and_leaves_no_file(tmp_path: Path) -> None:
    from rl8lite.examples import CartPole

    from .test_windowed import Stacked

    algo = Algorithm(CartPole, num_envs=2, horizon=4, model_cls=Stacked, model_config={"window": True})
    with pytest.raises(ExportError, match="cannot be exported"):
        export_onnx(algo.policy, algo.env.observation_spec, tmp_path / "p.onnx")
    assert not (tmp_path / "p.onnx").exists()


def test_the_onnx_model_is_logged_to_the_run_and_served_by_mlflow(mlflow_store: str) -> None:
    algo = trained(Algorithm, Pendulum)
    mlflow.set_tracking_uri(mlflow_store)
    with mlflow.start_run() as run:
        info = log_onnx_model(run.info.run_id, algo.policy, algo.env.observation_spec, name="policy-onnx", step=64)
    model = mlflow.pyfunc.load_model(info.model_uri)
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    with torch.no_grad():
        expected = algo.policy.act(torch.from_numpy(obs), deterministic=True)[0].numpy()
    np.testing.assert_allclose(model.predict({"obs": obs})["actions"], expected, rtol=1e-5, atol=1e-5)
    assert mlflow.get_logged_model(info.model_id).source_run_id == run.info.run_id


def test_the_trainer_exports_onnx_and_logs_its_onnx_flavour(tmp_path: Path, experiment_name: str) -> None:
    from rl8lite import Trainer

    with Trainer(trained(Algorithm, Pendulum), experiment_name=experiment_name, progress=False,
                 save_policy=False) as trainer:
        path = trainer.export_onnx(tmp_path / "policy.onnx")
        trainer.log_policy(onnx=True)
        run_id = trainer.tracker.run_id
    obs = np.zeros((2, 3), dtype=np.float32)
    from_file = ort.InferenceSession(str(path)).run(None, {"obs": obs})[0]
    experiment = mlflow.get_run(run_id).info.experiment_id
    models = mlflow.search_logged_models(experiment_ids=[experiment], output_format="list")
    assert sorted(m.name for m in models) == ["policy", "policy-onnx"]
    (onnx_model,) = [m for m in models if m.name == "policy-onnx"]
    served = mlflow.pyfunc.load_model(f"models:/{onnx_model.model_id}").predict({"obs": obs})["actions"]
    np.testing.assert_allclose(served, from_file, rtol=1e-6)
