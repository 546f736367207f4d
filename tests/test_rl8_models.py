"""rl8's model interface: ``forward(batch) -> features TensorDict`` with ``value_function()``
(and ``state_spec`` for recurrent models) trains exactly as the same network written with
rl8lite's stateless protocol."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl8lite import Algorithm, RecurrentAlgorithm, RecurrentAlgorithmConfig
from rl8lite.data import DataKeys
from rl8lite.env import ContinuousDummyEnv, DiscreteDummyEnv
from rl8lite.examples import CartPole
from rl8lite.models import Model, RecurrentModel
from rl8lite.models.rl8_style import Rl8Model, Rl8RecurrentModel, stateless
from rl8lite.specs import Composite, Unbounded
from rl8lite.views import ViewRequirement

from .helpers import MaskedChoice


class Native(Model):
    """rl8lite's protocol: ``(features, values)`` from one call."""

    def __init__(self, observation_spec: Any, action_spec: Any, /, *, continuous: bool = False) -> None:
        super().__init__(observation_spec, action_spec, continuous=continuous)
        self.continuous = continuous
        outputs = 2 if continuous else action_spec.n
        self.body = nn.Linear(observation_spec.shape[0], 16)
        self.head = nn.Linear(16, outputs)
        self.vf = nn.Linear(16, 1)

    def hidden(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.body(obs))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.hidden(obs)
        return self.head(x), self.vf(x)


class Rl8Style(Native):
    """The same network written the rl8 way: a feature TensorDict and a cached value."""

    def forward(self, batch: TensorDict) -> TensorDict:  # type: ignore[override]
        x = self.hidden(batch[DataKeys.OBS])
        out = self.head(x)
        self._value = self.vf(x)
        if self.continuous:
            features = {"mean": out[:, :1], "log_std": out[:, 1:]}
        else:
            features = {"logits": out.reshape(-1, 1, self.action_spec.n)}
        return TensorDict(features, batch_size=batch.batch_size)

    def value_function(self) -> torch.Tensor:
        return self._value


def run(env_cls: type, model_cls: type, **config: Any) -> tuple[list[dict[str, float]], Algorithm]:
    algo = Algorithm(env_cls, num_envs=8, horizon=8, seed=4, sgd_minibatch_size=16, model_cls=model_cls,
                     entropy_coeff=0.01, **config)
    stats = []
    for _ in range(3):
        stats += [algo.collect(), algo.step()]
    return [{k: v for k, v in s.items() if not k.startswith(("profiling/", "memory/"))} for s in stats], algo


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize(("env_cls", "continuous"), [(DiscreteDummyEnv, False), (ContinuousDummyEnv, True)])
def test_an_rl8_style_model_trains_exactly_like_the_same_network_in_rl8lites_protocol(
    env_cls: type, continuous: bool, normalize: bool
) -> None:
    config = {"model_config": {"continuous": continuous}, "normalize_observations": normalize}
    native, native_algo = run(env_cls, Native, **config)
    ported, ported_algo = run(env_cls, Rl8Style, **config)
    assert ported == native
    if normalize:  # the statistics reach the model
        assert run(env_cls, Native, **{**config, "normalize_observations": False})[0] != native
    for a, b in zip(native_algo.policy.parameters(), ported_algo.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    assert isinstance(ported_algo.policy.network, Rl8Model) and ported_algo.policy.model.__class__ is Rl8Style
    assert ported_algo.params["model_cls"].endswith("Rl8Style")
    # the model is registered once: the adapter is no module of its own
    assert list(ported_algo.policy.state_dict()) == list(native_algo.policy.state_dict())


class NativeLSTM(RecurrentModel):
    """rl8lite's recurrent protocol around an ``nn.LSTM`` run one step at a time."""

    def __init__(self, observation_spec: Any, action_spec: Any, /, *, width: int = 8) -> None:
        super().__init__(observation_spec, action_spec, width=width)
        self.width = width
        self.state_size = 2 * width
        self.lstm = nn.LSTM(observation_spec.shape[0], width, batch_first=True)
        self.head = nn.Linear(width, action_spec.n)
        self.vf = nn.Linear(width, 1)

    def forward(self, obs: torch.Tensor, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # type: ignore[override]
        h, c = states.split(self.width, dim=-1)
        out, (h, c) = self.lstm(obs[:, None], (h[None].contiguous(), c[None].contiguous()))
        return self.head(out[:, 0]), self.vf(out[:, 0]), torch.cat([h[0], c[0]], dim=-1)


class Rl8LSTM(NativeLSTM):
    """The same, rl8's way: states as a TensorDict [B, 1] per ``state_spec``, sequences [B, T]."""

    def __init__(self, observation_spec: Any, action_spec: Any, /, *, width: int = 8) -> None:
        super().__init__(observation_spec, action_spec, width=width)
        self.state_spec = Composite({DataKeys.HIDDEN_STATES: Unbounded([1, width]),
                                     DataKeys.CELL_STATES: Unbounded([1, width])})

    def forward(self, batch: TensorDict, states: TensorDict) -> tuple[TensorDict, TensorDict]:  # type: ignore[override]
        h0 = states[DataKeys.HIDDEN_STATES][:, 0].permute(1, 0, 2).contiguous()
        c0 = states[DataKeys.CELL_STATES][:, 0].permute(1, 0, 2).contiguous()
        out, (h, c) = self.lstm(batch[DataKeys.OBS], (h0, c0))
        out = out.reshape(-1, self.width)
        self._value = self.vf(out)
        features = TensorDict({"logits": self.head(out)}, batch_size=[out.shape[0]])
        return features, TensorDict({DataKeys.HIDDEN_STATES: h.permute(1, 0, 2), DataKeys.CELL_STATES: c.permute(1, 0, 2)},
                                    batch_size=[batch.batch_size[0]])

    def value_function(self) -> torch.Tensor:
        return self._value


@pytest.mark.parametrize("normalize", [False, True])
def test_an_rl8_style_recurrent_model_trains_exactly_like_the_same_lstm_in_rl8lites_protocol(normalize: bool) -> None:
    def recurrent_run(model_cls: type, normalize: bool = normalize) -> tuple[list[dict[str, float]], Algorithm]:
        config = RecurrentAlgorithmConfig(num_envs=6, horizon=8, seq_len=4, seed=2, model_cls=model_cls,
                                          env_config={"max_episode_steps": 5}, sgd_minibatch_size=24,
                                          normalize_observations=normalize)
        algo = RecurrentAlgorithm(CartPole, config)
        stats = [algo.collect(), algo.step(), algo.collect(), algo.step()]
        return [{k: v for k, v in s.items() if not k.startswith(("profiling/", "memory/"))} for s in stats], algo

    native, _ = recurrent_run(NativeLSTM)
    ported, algo = recurrent_run(Rl8LSTM)
    if normalize:  # the statistics reach the model
        assert recurrent_run(NativeLSTM, False)[0][2:] != native[2:]
    assert [{k: v for k, v in s.items() if not k.startswith("episodes/")} for s in ported] == [
        {k: v for k, v in s.items() if not k.startswith("episodes/")} for s in native
    ]
    network = algo.policy.network
    assert isinstance(network, Rl8RecurrentModel) and network.state_size == 16
    states = torch.arange(32.0).reshape(2, 16)
    as_td = network.states_td(states)
    assert as_td[DataKeys.HIDDEN_STATES].shape == (2, 1, 8) and as_td[DataKeys.CELL_STATES][0, 0, 0] == 8.0
    assert torch.equal(network.flat_states(as_td), states)


def test_rl8_features_the_distributions_cannot_read_are_named() -> None:
    class Odd(Rl8Style):
        def forward(self, batch: TensorDict) -> TensorDict:  # type: ignore[override]
            self._value = torch.zeros(batch.batch_size[0], 1)
            return TensorDict({"scores": torch.zeros(batch.batch_size[0], 2)}, batch_size=batch.batch_size)

    with pytest.raises(TypeError, match=r"Odd returned features \['scores'\]: rl8lite's distributions take rl8's 'logits'"):
        Algorithm(DiscreteDummyEnv, num_envs=2, horizon=2, model_cls=Odd).validate()


def test_an_rl8_recurrent_model_without_a_state_spec_is_named() -> None:
    class NoSpec(RecurrentModel):
        def value_function(self) -> torch.Tensor:
            return torch.zeros(1, 1)

    with pytest.raises(TypeError, match=r"NoSpec follows rl8's recurrent interface .* no state_spec Composite"):
        stateless(NoSpec(DiscreteDummyEnv(1).observation_spec, DiscreteDummyEnv(1).action_spec))


class MaskedWindow(Model):
    """rl8's algotrading pattern: a nested view, the action mask applied inside the model."""

    def __init__(self, observation_spec: Any, action_spec: Any, /) -> None:
        super().__init__(observation_spec, action_spec)
        self.view_requirements[(DataKeys.OBS, "position")] = ViewRequirement(shift=3)
        self.head = nn.Linear(4 * 2, 4)
        self.vf = nn.Linear(4 * 2, 1)

    def forward(self, batch: TensorDict) -> TensorDict:  # type: ignore[override]
        window = batch[DataKeys.OBS, "position", DataKeys.INPUTS].flatten(1)
        mask = batch[DataKeys.OBS, DataKeys.ACTION_MASK]
        logits = self.head(window) + torch.log(mask.float()).clamp(min=torch.finfo().min)
        self._value = self.vf(window)
        return TensorDict({"logits": logits.reshape(-1, 1, 4)}, batch_size=batch.batch_size)

    def value_function(self) -> torch.Tensor:
        return self._value


def test_an_rl8_style_model_with_a_nested_view_trains_on_dict_observations() -> None:
    algo = Algorithm(MaskedChoice, num_envs=4, horizon=8, seed=0, model_cls=MaskedWindow, sgd_minibatch_size=8)
    algo.validate()
    for _ in range(2):
        algo.collect()  # MaskedChoice raises if a masked action is ever taken
        assert math.isfinite(algo.step()["losses/total"])


def test_rl8lites_own_models_pass_through_unadapted() -> None:
    env = DiscreteDummyEnv(1)
    model = Native(env.observation_spec, env.action_spec)
    assert stateless(model) is model


@pytest.mark.parametrize("name", [
    "rl8lite.models.base", "rl8lite.models.rl8_style", "rl8lite.policies", "rl8lite.distributions",
    "rl8lite.tracking.rl8_policy_model",
])
def test_the_examples_in_the_docstrings_run(name: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0


def test_a_later_view_requirement_overrides_an_earlier_nested_one_in_order() -> None:
    # rl8 applies the requirements one after another: the whole "obs" set last replaces the
    # window that ("obs", "position") made before it, as the collect and update read it.
    model = Model(Composite(position=Unbounded(2)), DiscreteDummyEnv(1).action_spec)
    model.view_requirements.clear()
    model.view_requirements[(DataKeys.OBS, "position")] = ViewRequirement(shift=2)
    model.view_requirements[DataKeys.OBS] = ViewRequirement()
    obs = TensorDict({"position": torch.randn(3, 4, 2)}, batch_size=[3, 4])
    inputs = model.apply_view_requirements(TensorDict({DataKeys.OBS: obs}, batch_size=[3, 4]))
    assert torch.equal(inputs[DataKeys.OBS, "position"], obs["position"][:, -1])


def test_pickles_naming_the_former_module_of_the_recurrent_models_load() -> None:
    import pickle

    from rl8lite.models import DefaultRecurrentModel

    old = b"crl8lite.models.recurrent\nDefaultRecurrentModel\np0\n."  # pickled by reference
    assert pickle.loads(old) is DefaultRecurrentModel
    assert pickle.loads(old.replace(b"DefaultRecurrentModel", b"RecurrentModel")) is RecurrentModel
