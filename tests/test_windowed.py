"""View requirements in training: the windows a model sees in the collect and the update.

Known answers come two independent ways: an env that stacks its own frames
(:func:`tests.helpers.frame_stacked`) must train bit for bit like a model that asks for
the same window with a view requirement, and on :class:`EpisodicCounter`, whose
observation is the step's index in its episode, every window is written out by hand.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rl8lite import Algorithm, ConfigError, RecurrentAlgorithm, RecurrentAlgorithmConfig
from rl8lite.data import DataKeys
from rl8lite.examples import CartPole
from rl8lite.models import DefaultRecurrentModel, Model
from rl8lite.runtime.checkpoint_files import capture_rng, restore_rng
from rl8lite.views import ViewRequirement

from .helpers import EpisodicCounter, MaskedChoice, frame_stacked

FRAMES = 4


class Stacked(Model):
    """One MLP over the last ``FRAMES`` observations: stacked by the env, or a view's window."""

    def __init__(self, observation_spec: Any, action_spec: Any, /, *, window: bool = False, frames: int = FRAMES) -> None:
        super().__init__(observation_spec, action_spec, window=window, frames=frames)
        self.window = window
        if window:
            self.view_requirements[DataKeys.OBS] = ViewRequirement(shift=frames - 1)
        self.net = torch.nn.Sequential(torch.nn.Linear(4 * frames, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))

    def forward(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x = obs[DataKeys.INPUTS] if self.window else obs
        out = self.net(x.flatten(1))
        return out[:, :2], out[:, 2:]


class SeparableStacked(Stacked):
    """The same, with separate actor and critic passes (values after the rollout)."""

    separable = True

    def forward_features(self, obs: Any) -> torch.Tensor:
        return self(obs)[0]

    def forward_values(self, obs: Any) -> torch.Tensor:
        return self(obs)[1]


def stable(stats: list[dict[str, float]]) -> list[dict[str, float]]:
    return [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in s.items()
         if not k.startswith(("profiling/", "memory/"))}
        for s in stats
    ]


def stacking(window: bool, model_cls: type = Stacked, **overrides: Any) -> Algorithm:
    # Truncations with final_obs every 11 steps, terminations, and an env reset every 3 collects.
    config = {"num_envs": 8, "horizon": 8, "seed": 1, "env_config": {"max_episode_steps": 11},
              "horizons_per_env_reset": 3, "sgd_minibatch_size": 32, "update_chunk_size": 12,
              "model_cls": model_cls, "model_config": {"window": window}, **overrides}
    return Algorithm(CartPole if window else frame_stacked(CartPole, FRAMES), **config)


def train(algo: Algorithm, iterations: int) -> list[dict[str, float]]:
    stats = []
    for _ in range(iterations):
        stats += [algo.collect(), algo.step()]
    return stable(stats)


@pytest.mark.parametrize("model_cls", [Stacked, SeparableStacked])
def test_a_view_trains_bit_for_bit_like_an_env_that_stacks_the_frames(model_cls: type) -> None:
    stacked = stacking(False, model_cls)
    stacked_stats = train(stacked, 7)  # each run seeds the process's random stream: one after the other
    windowed = stacking(True, model_cls)
    assert train(windowed, 7) == stacked_stats
    for a, b in zip(stacked.policy.parameters(), windowed.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    # each observation is stored once: a store of FRAMES - 1 earlier steps + T + 1
    assert windowed.recurrence.stores[()].shape == (8, FRAMES - 1 + 8 + 1, 4)
    assert stacked.buffer[DataKeys.OBS].shape == (8, 9, FRAMES, 4)


def test_windows_resume_from_a_state_dict_between_collect_and_step() -> None:
    straight = stacking(True)
    reference = train(straight, 4)
    first = stacking(True)
    done = train(first, 1)
    done.append(stable([first.collect()])[0])  # buffered: the step reads the windows kept
    state, rng = first.state_dict(), capture_rng()
    assert set(state["windows"]) == {"history", "start", "initial"}
    resumed = stacking(True)
    train(resumed, 2)  # a used algorithm takes a state dict too (its carries are no inference tensors)
    resumed.load_state_dict(state)
    restore_rng(rng)
    continued = stable([resumed.step()])
    continued += train(resumed, 2)
    assert done + continued == reference


class Recorder(Model):
    """Records the windows it sees: in the collect (no grad) and in the update (grad)."""

    def __init__(self, observation_spec: Any, action_spec: Any, /, *, shift: int = 2) -> None:
        super().__init__(observation_spec, action_spec, shift=shift)
        self.view_requirements[DataKeys.OBS] = ViewRequirement(shift=shift)
        self.head = torch.nn.Linear(shift + 1, 3)
        self.seen: dict[bool, list[TensorDict]] = {True: [], False: []}

    def forward(self, obs: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        self.seen[torch.is_grad_enabled()].append(obs.detach().clone())
        out = self.head(obs[DataKeys.INPUTS][..., 0])
        return out[:, :2], out[:, 2:]


def expected_window(step_in_episode: float, shift: int) -> tuple[list[float], list[bool]]:
    """EpisodicCounter observes its step's index e in the episode: the window ending there is
    e - shift .. e, and the steps before the episode's first (index < 0) are padding (zeros)."""
    indices = [step_in_episode - shift + j for j in range(shift + 1)]
    return [max(i, 0.0) for i in indices], [i < 0 for i in indices]


def test_collect_and_update_windows_stop_at_episode_starts_and_continue_across_collects() -> None:
    shift, horizon, num_envs = 3, 4, 3  # copies' episodes last 3, 4 and 5 steps
    algo = Algorithm(EpisodicCounter, num_envs=num_envs, horizon=horizon, seed=0, horizons_per_env_reset=-1,
                     model_cls=Recorder, model_config={"shift": shift}, num_sgd_iters=1)
    model = algo.policy.model
    for _ in range(3):  # one reset, then two collects that continue the episodes
        algo.collect()
        observed = algo.buffer[DataKeys.OBS][:, :, 0]  # [N, T + 1]: each step's index in its episode
        acted = model.seen[False][-horizon - 1 : -1]  # one forward per step (then the bootstrap values)
        for t, inputs in enumerate(acted):
            for n in range(num_envs):
                values, padding = expected_window(observed[n, t].item(), shift)
                assert inputs[DataKeys.INPUTS][n, :, 0].tolist() == values, (t, n)
                assert inputs[DataKeys.PADDING_MASK][n].tolist() == padding, (t, n)
        model.seen[True].clear()
        algo.step()
        (trained,) = model.seen[True]  # one minibatch, in buffer order: row n * T + t
        for row in range(num_envs * horizon):
            n, t = divmod(row, horizon)
            values, padding = expected_window(observed[n, t].item(), shift)
            assert trained[DataKeys.INPUTS][row, :, 0].tolist() == values, (n, t)
            assert trained[DataKeys.PADDING_MASK][row].tolist() == padding, (n, t)
    # the later collects began mid-episode: their first windows reach into the previous collect
    assert algo.buffer[DataKeys.OBS][:, 0, 0].tolist() != [0.0] * num_envs


class NestedWindow(Model):
    """rl8-style keys on a dict observation: the default view (current step) plus a window
    of one nested entry; the action mask stays the current step's."""

    def __init__(self, observation_spec: Any, action_spec: Any, /) -> None:
        super().__init__(observation_spec, action_spec)
        self.view_requirements[(DataKeys.OBS, "position")] = ViewRequirement(shift=2)
        self.head = torch.nn.Linear(3 * observation_spec["position"].shape[-1], action_spec.n + 1)

    def forward(self, obs: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
        window = obs["position"]
        assert window[DataKeys.INPUTS].shape[1:2] == (3,) and obs[DataKeys.ACTION_MASK].dim() == 2
        out = self.head(window[DataKeys.INPUTS].flatten(1))
        return out[:, :-1], out[:, -1:]


def test_a_nested_window_on_a_dict_observation_trains() -> None:
    algo = Algorithm(MaskedChoice, num_envs=4, horizon=4, seed=0, model_cls=NestedWindow, sgd_minibatch_size=8)
    algo.validate()
    algo.collect()
    assert math.isfinite(algo.step()["losses/total"])
    assert algo.recurrence.stores[("position",)].shape == (4, 2 + 4 + 1, 2)  # 2 earlier steps + T + 1
    assert algo.buffer[DataKeys.OBS, DataKeys.ACTION_MASK].is_contiguous()  # not windowed: as before


class Requiring(Model):
    def __init__(self, observation_spec: Any, action_spec: Any, /, *, key: Any = DataKeys.OBS,
                 method: str = "padded_rolling_window") -> None:
        super().__init__(observation_spec, action_spec, key=key, method=method)
        self.view_requirements[key] = ViewRequirement(shift=2, method=method)
        self.head = torch.nn.Linear(1, 3)


@pytest.mark.parametrize(("config", "message"), [
    ({"method": "rolling_window"}, r"uses RollingWindow, which drops the first `shift` steps .*'padded_rolling_window'"),
    ({"key": "rewards"}, r"key 'rewards': the algorithm windows observations only"),
    ({"key": (DataKeys.OBS, "price")}, r"key \('obs', 'price'\) is not in the observation spec, whose entries are \['obs'\]"),
])
def test_view_requirements_the_collect_cannot_serve_are_named(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Algorithm(EpisodicCounter, num_envs=2, horizon=2, model_cls=Requiring, model_config=config)


def test_a_recurrent_model_with_windows_is_refused_by_name() -> None:
    class WindowedLSTM(DefaultRecurrentModel):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, num_features=2, **kwargs)
            self.view_requirements[DataKeys.OBS] = ViewRequirement(shift=1)

    config = RecurrentAlgorithmConfig(num_envs=2, horizon=4, seq_len=2, model_cls=WindowedLSTM)
    with pytest.raises(ConfigError, match=r"WindowedLSTM is a RecurrentModel with view requirements that window \['obs'\]"):
        RecurrentAlgorithm(EpisodicCounter, config)


def test_a_trainer_resumes_windows_that_continue_across_collects_from_its_checkpoint(experiment_name: str) -> None:
    from rl8lite import Trainer

    def make() -> Trainer:
        # never reset after the first collect; windows of 12 reach back past the last collect
        # (horizon 8)
        algo = stacking(True, horizons_per_env_reset=-1, env_config={"max_episode_steps": 40},
                        model_config={"window": True, "frames": 12})
        return Trainer(algo, experiment_name=experiment_name, progress=False, save_policy=False)

    straight = make()
    reference = stable([straight.step() for _ in range(4)])
    straight.close()
    first = make()
    done = stable([first.step() for _ in range(2)])
    path = first.save_checkpoint()
    first.close()
    resumed = Trainer.from_checkpoint(path, progress=False, save_policy=False)
    continued = stable([resumed.step() for _ in range(2)])
    resumed.close()
    assert [{k: v for k, v in s.items() if not k.startswith("throughput/")} for s in done + continued] == [
        {k: v for k, v in s.items() if not k.startswith("throughput/")} for s in reference
    ]


def test_a_rollout_video_of_a_model_with_windows_is_refused_by_name_and_training_goes_on(experiment_name: str) -> None:
    from rl8lite import Trainer
    from rl8lite.conditions import HitsUpperBound

    with Trainer(stacking(True), experiment_name=experiment_name, progress=False, save_policy=False) as trainer:
        with pytest.raises(NotImplementedError, match=r"Stacked sees windows of past observations \['obs'\]"):
            trainer.record_video(max_steps=5)
        with pytest.warns(RuntimeWarning, match="no rollout videos: Stacked sees windows"):
            trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 2)], steps_per_video=1)
        assert trainer.state["algorithm/steps"] == 2
