"""rl8's policy facade (``rl8lite.policies``): rl8's flags over rl8lite's policy, with the
answers rl8lite's own methods give on the same inputs."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest.mock import patch

import mlflow
import pytest
import torch
from tensordict import TensorDict

from rl8lite import Algorithm, RecurrentAlgorithm, RecurrentAlgorithmConfig
from rl8lite.data import DataKeys
from rl8lite.distributions import Normal, SquashedNormal
from rl8lite.env import ContinuousDummyEnv, DiscreteDummyEnv
from rl8lite.models import Model
from rl8lite.policies import Policy, RecurrentPolicy
from rl8lite.specs import Bounded, Unbounded
from rl8lite.views import ViewRequirement

ENV = DiscreteDummyEnv(1)


def batch(rows: int = 5, steps: int = 3) -> TensorDict:
    torch.manual_seed(0)
    return TensorDict({DataKeys.OBS: ENV.observation_spec.rand([rows, steps])}, batch_size=[rows, steps])


@pytest.mark.parametrize("kind", ["last", "all"])
def test_sample_gives_what_the_policys_own_act_gives_on_those_observations(kind: str) -> None:
    policy = Policy(ENV.observation_spec, ENV.action_spec)
    inputs = batch()
    out = policy.sample(inputs, kind=kind, deterministic=True, return_logp=True, return_values=True, return_views=True)
    obs = inputs[DataKeys.OBS][:, -1] if kind == "last" else inputs[DataKeys.OBS].reshape(-1, 1)  # row b * T + t
    with torch.no_grad():
        actions, logp, values = policy.act(obs, deterministic=True)
    assert torch.equal(out[DataKeys.ACTIONS], actions)
    assert torch.equal(out[DataKeys.LOGP], logp) and torch.equal(out[DataKeys.VALUES], values)
    assert torch.equal(out[DataKeys.VIEWS, DataKeys.OBS], obs)
    assert out[DataKeys.FEATURES].batch_size == (obs.shape[0],)
    # views in the input are used as they are
    again = policy.sample(TensorDict({DataKeys.VIEWS: out[DataKeys.VIEWS]}, batch_size=[obs.shape[0]]),
                          deterministic=True)
    assert torch.equal(again[DataKeys.ACTIONS], actions)


class ModeRecorder(Model):
    """Windows of 2 steps; records the training mode and grad mode of each forward."""

    def __init__(self, observation_spec: Any, action_spec: Any, /) -> None:
        super().__init__(observation_spec, action_spec)
        self.view_requirements[DataKeys.OBS] = ViewRequirement(shift=1)
        self.head = torch.nn.Linear(2, 3)
        self.seen: list[tuple[bool, bool, torch.Tensor]] = []

    def forward(self, obs: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        self.seen.append((self.training, torch.is_grad_enabled(), obs[DataKeys.INPUTS].detach().clone()))
        out = self.head(obs[DataKeys.INPUTS][..., 0])
        return out[:, :2], out[:, 2:]


def test_sample_applies_view_requirements_modes_and_gradients_as_rl8_does() -> None:
    policy = Policy(ENV.observation_spec, ENV.action_spec, model_cls=ModeRecorder)
    model = policy.model
    inputs = TensorDict({DataKeys.OBS: torch.tensor([[[1.0], [2.0], [3.0]]])}, batch_size=[1, 3])
    out = policy.sample(inputs, kind="all", deterministic=True, return_values=True)
    assert model.training  # back as it was
    training, grad, window = model.seen[-1]
    assert (training, grad) == (False, False)  # eval mode for the mode of the distribution; no graph
    assert window[:, :, 0].tolist() == [[0.0, 1.0], [1.0, 2.0], [2.0, 3.0]]  # zeros in front of step 0
    assert out[DataKeys.VALUES].grad_fn is None
    out = policy.sample(inputs, kind="last", requires_grad=True, return_values=True)
    training, grad, window = model.seen[-1]
    assert (training, grad) == (True, True) and window[:, :, 0].tolist() == [[2.0, 3.0]]
    assert out[DataKeys.VALUES].grad_fn is not None


def test_sample_inplace_writes_into_the_flattened_batch() -> None:
    policy = Policy(ENV.observation_spec, ENV.action_spec)
    out = policy.sample(batch(), kind="all", inplace=True, return_logp=True)
    assert out.batch_size == (15,) and {DataKeys.OBS, DataKeys.ACTIONS, DataKeys.LOGP} <= set(out.keys())


def test_recurrent_sample_unrolls_the_state_step_by_step() -> None:
    policy = RecurrentPolicy(ENV.observation_spec, ENV.action_spec)
    inputs = batch(rows=4, steps=3)
    out, states = policy.sample(inputs, deterministic=True, return_logp=True, return_values=True)
    expected, state = [], policy.init_states(4)
    with torch.no_grad():
        for t in range(3):
            _, _, values, state = policy.act_recurrent(inputs[DataKeys.OBS][:, t], state, deterministic=True)
            expected.append(values)
    assert torch.equal(out[DataKeys.VALUES], torch.stack(expected, 1).reshape(-1, 1))  # row b * T + t
    assert torch.equal(states, state) and states.shape == (4, policy.model.state_size)
    # rl8's state TensorDict is accepted too
    named = TensorDict({DataKeys.HIDDEN_STATES: state[:, None, :64], DataKeys.CELL_STATES: state[:, None, 64:]},
                       batch_size=[4, 1])
    _, from_named = policy.sample(inputs[:, :1], named, deterministic=True)
    _, from_flat = policy.sample(inputs[:, :1], state, deterministic=True)
    assert torch.equal(from_named, from_flat)


def test_an_algorithms_policy_is_rl8s_and_init_states_starts_each_collects_states() -> None:
    assert type(Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2).policy) is Policy
    algo = RecurrentAlgorithm(DiscreteDummyEnv, RecurrentAlgorithmConfig(num_envs=4, horizon=8, seq_len=2,
                                                                         seqs_per_state_reset=-1))
    assert type(algo.policy) is RecurrentPolicy
    with patch.object(RecurrentPolicy, "init_states", wraps=algo.policy.init_states) as init_states:
        algo.collect()  # the env is reset: the states start from init_states, once
        algo.collect()
    assert init_states.call_count == 2 and algo.state.seqs == 8


@pytest.mark.parametrize("recurrent", [False, True])
def test_a_saved_policy_serves_its_deterministic_samples_through_mlflow(recurrent: bool, tmp_path: Path) -> None:
    env = ContinuousDummyEnv(1)
    policy = (RecurrentPolicy if recurrent else Policy)(env.observation_spec, env.action_spec)
    inputs = TensorDict({DataKeys.OBS: env.observation_spec.rand([2, 3])}, batch_size=[2, 3])
    if recurrent:
        out, states = policy.sample(inputs, deterministic=True, return_logp=True, return_values=True)
    else:
        out = policy.sample(inputs, kind="all", deterministic=True, return_logp=True, return_values=True)
    mlflow.pyfunc.save_model(tmp_path / "model", python_model=policy.save(tmp_path / "policy.pkl"),
                             artifacts={"policy": str(tmp_path / "policy.pkl")})
    answer = mlflow.pyfunc.load_model(str(tmp_path / "model")).predict({"obs": inputs[DataKeys.OBS].numpy()})
    frame = answer[0] if recurrent else answer
    assert list(frame.columns) == [DataKeys.ACTIONS, DataKeys.LOGP, DataKeys.VALUES] and len(frame) == 6
    for row in range(6):
        assert math.isclose(frame.iloc[row][DataKeys.VALUES][0], out[DataKeys.VALUES][row, 0].item(), rel_tol=1e-6)
        assert math.isclose(frame.iloc[row][DataKeys.LOGP][0], out[DataKeys.LOGP][row, 0].item(), rel_tol=1e-6)
    if recurrent:
        state_frame = answer[1]
        assert list(state_frame.columns) == [DataKeys.HIDDEN_STATES, DataKeys.CELL_STATES] and len(state_frame) == 2
        assert state_frame.iloc[1][DataKeys.CELL_STATES].shape == (1, 64)
        assert torch.allclose(torch.as_tensor(state_frame.iloc[1][DataKeys.CELL_STATES]).flatten(), states[1, 64:])


class OwnNormal(Normal):
    """A user's Gaussian: it must receive the model's features as one tensor."""

    def __init__(self, features: torch.Tensor, action_spec: Any, /, **kwargs: Any) -> None:
        assert isinstance(features, torch.Tensor)
        super().__init__(features, action_spec, **kwargs)


@pytest.mark.parametrize("distribution_cls", [Normal, SquashedNormal, OwnNormal])
@pytest.mark.parametrize("deterministic", [False, True])
def test_sample_actions_draws_what_the_concatenated_features_give(distribution_cls: type,
                                                                  deterministic: bool) -> None:
    # The default model's Gaussian mean and log-std reach a Normal apart: the same draws.
    obs_spec, action_spec = Unbounded(3), Bounded(-2.0, 2.0, shape=[2])
    policy = Policy(obs_spec, action_spec, distribution_cls=distribution_cls)
    with torch.no_grad():
        policy.model.log_std[0] = -30.0  # clamped, apart or not
        obs = obs_spec.rand([7])
        torch.manual_seed(0)
        actions, logp = policy.sample_actions(obs, deterministic=deterministic)
        dist = distribution_cls(policy.model.forward_features(obs), action_spec)
        torch.manual_seed(0)
        if deterministic:
            expected = dist.deterministic_sample()
            expected_logp = dist.logp(expected)
        else:
            expected, expected_logp = dist.sample_with_logp()
    assert torch.equal(actions, expected) and torch.equal(logp, expected_logp)
    assert logp.shape == (7, 1)


def test_gaussian_parts_follow_the_class_given_later_and_autocasts_promotion() -> None:
    obs_spec, action_spec = Unbounded(3), Bounded(-2.0, 2.0, shape=[2])
    policy = Policy(obs_spec, action_spec, distribution_cls=Normal)
    obs = obs_spec.rand([5])
    policy.distribution_cls = OwnNormal  # a user's class: one features tensor, as before
    with torch.no_grad():
        assert policy.sample_actions(obs)[0].shape == (5, 2)
        policy.distribution_cls = Normal
        # under autocast the concatenation promoted a bf16 mean to the float32 log-std
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.manual_seed(0)
            actions, logp = policy.sample_actions(obs)
            torch.manual_seed(0)
            expected = Normal(policy.model.forward_features(obs), action_spec).sample_with_logp()
    assert logp.dtype == torch.float32
    assert torch.equal(actions, expected[0]) and torch.equal(logp, expected[1])


def test_rl8lite_imported_under_inference_mode_still_trains_a_gaussian_policy() -> None:
    # its module-level tensors are normal tensors: an update saves them for backward
    code = ("import torch\n"
            "with torch.inference_mode():\n"
            "    import rl8lite\n"
            "from rl8lite.env import ContinuousDummyEnv\n"
            "algo = rl8lite.Algorithm(ContinuousDummyEnv, num_envs=4, horizon=4, device='cpu')\n"
            "algo.collect()\n"
            "print(algo.step()['losses/total'])\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                            timeout=300)
    assert result.returncode == 0, result.stderr
