"""Gymnasium envs through ``gymnasium_env``: the same trajectories as Gymnasium itself,
spaces as specs, configs, rendering, and how configs and checkpoints name the class."""

from __future__ import annotations

import importlib.util
import multiprocessing
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDict

gymnasium = pytest.importorskip("gymnasium")

from gymnasium import spaces

from rl8lite import Algorithm, TrainConfig, Trainer
from rl8lite.algorithms.rollout import check_step_output
from rl8lite.env import EnvConfigError, env_reference, gymnasium_env, import_env_class
from rl8lite.env.gymnasium_spaces import (
    UnsupportedSpaceError,
    action_mapping,
    observation_mapping,
)
from rl8lite.specs import Bounded, Categorical, Composite, MultiCategorical, Unbounded

from .gymnasium_envs import DICT_WALK_ID, DictWalk

CPU = torch.device("cpu")


def as_tensor(value: Any) -> torch.Tensor | TensorDict:
    """A numpy observation of one copy as the adapter shows it (float64 as float32)."""
    if isinstance(value, dict):
        return TensorDict({k: as_tensor(v) for k, v in value.items()}, batch_size=[])
    if isinstance(value, tuple):
        return TensorDict({str(i): as_tensor(v) for i, v in enumerate(value)}, batch_size=[])
    array = np.asarray(value)
    return torch.from_numpy(array.astype(np.float32) if array.dtype == np.float64 else array.copy())


def shifted(obs: torch.Tensor | TensorDict) -> torch.Tensor | TensorDict:
    """DictWalk's observation with the offsets the adapter removes (Discrete/MultiDiscrete starts)."""
    obs = obs.clone()
    obs["goal"] = (obs["goal"] - 1).reshape(1)
    obs["grid"] = obs["grid"] - torch.tensor([-1, 2])
    obs["extra", "0"] = obs["extra", "0"].reshape(1)
    return obs


def assert_rows_equal(batch: Any, rows: list[Any], what: str, transform: Any = None) -> None:
    for i, row in enumerate(rows):
        expected = as_tensor(row)
        if transform is not None:
            expected = transform(expected)
        got = batch[i]
        same = (
            (got == expected).all()
            if isinstance(got, TensorDict)
            else torch.equal(got, expected.reshape(got.shape))
        )
        assert same, f"{what} of copy {i}: {got} != {expected}"


CASES = {
    # discrete actions, terminations, and truncations through max_episode_steps
    "CartPole-v1": {"make_kwargs": {"max_episode_steps": 15}, "steps": 60},
    # continuous actions (Box, clipped for the env), truncations
    "Pendulum-v1": {"make_kwargs": {"max_episode_steps": 25}, "steps": 60},
    # nested Dict/Tuple observations of every space kind, Discrete actions with start=-1
    DICT_WALK_ID: {"make_kwargs": {}, "steps": 40, "transform": shifted},
}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("env_id", sorted(CASES))
def test_trajectories_equal_separately_made_gymnasium_envs_reset_by_hand(
    env_id: str, mode: str
) -> None:
    case, n, seed = CASES[env_id], 3, 1234
    env = gymnasium_env(env_id, vectorization_mode=mode, seed=seed, **case["make_kwargs"])(n)
    references = [gymnasium.make(env_id, **case["make_kwargs"]) for _ in range(n)]
    transform = case.get("transform")
    try:
        first = env.reset()
        assert_rows_equal(
            first, [r.reset(seed=seed + i)[0] for i, r in enumerate(references)], "reset", transform
        )
        generator = torch.Generator().manual_seed(0)
        ends = {"terminated": 0, "truncated": 0}
        for t in range(case["steps"]):
            if isinstance(env.action_spec, Categorical):
                actions = torch.randint(0, env.action_spec.n, (n, 1), generator=generator)
                env_actions = [
                    int(a) + int(references[0].action_space.start) for a in actions[:, 0]
                ]
            else:  # Pendulum: a third of the samples outside [-2, 2], clipped for the env
                actions = 6 * torch.rand((n, 1), generator=generator) - 3
                env_actions = [np.clip(a.numpy(), -2.0, 2.0) for a in actions]
            out = env.step(actions)
            rows = []
            for i, reference in enumerate(references):
                obs, reward, terminated, truncated, _ = reference.step(env_actions[i])
                final = obs
                if terminated or truncated:
                    obs, _ = reference.reset()
                rows.append((obs, reward, terminated, truncated, final))
            assert_rows_equal(out["obs"], [r[0] for r in rows], f"obs at step {t}", transform)
            assert torch.equal(
                out["rewards"], torch.tensor([[r[1]] for r in rows], dtype=torch.float64).float()
            )
            assert out["terminated"].flatten().tolist() == [r[2] for r in rows], (
                f"terminated at step {t}"
            )
            assert out["truncated"].flatten().tolist() == [r[3] for r in rows], (
                f"truncated at step {t}"
            )
            done = [i for i, r in enumerate(rows) if r[2] or r[3]]
            assert_rows_equal(
                out["final_obs"][done],
                [rows[i][4] for i in done],
                f"final_obs at step {t}",
                transform,
            )
            ends["terminated"] += sum(r[2] for r in rows)
            ends["truncated"] += sum(r[3] for r in rows)
        assert ends["truncated"] > 0 and (ends["terminated"] > 0 or env_id == "Pendulum-v1"), ends
    finally:
        env.close()


def test_every_step_output_has_the_specs_shapes_and_final_obs_equals_obs_where_nothing_ended() -> (
    None
):
    env = gymnasium_env(DICT_WALK_ID, seed=0)(2)
    try:
        obs = env.reset()
        env.observation_spec.assert_is_in(obs)
        for _ in range(30):
            out = env.step(env.action_spec.rand([2]))
            check_step_output(out, env.observation_spec, 2, "DictWalk")
            env.observation_spec.assert_is_in(out["obs"])
            env.observation_spec.assert_is_in(out["final_obs"])
            going_on = ~(out["terminated"] | out["truncated"]).flatten()
            assert (out["final_obs"][going_on] == out["obs"][going_on]).all()
    finally:
        env.close()


F32, F64 = np.float32, np.float64
OBSERVATION_TABLE = [
    (spaces.Box(-np.inf, np.inf, (3,), F32), Unbounded(3), np.ones((2, 3), F32), torch.ones(2, 3)),
    (
        spaces.Box(-1.0, 2.0, (2,), F64),
        Bounded(-1.0, 2.0, shape=[2]),
        np.full((2, 2), 0.1),
        torch.full((2, 2), 0.1),
    ),
    (
        spaces.Box(np.array([-1.0, -np.inf], F32), np.array([np.inf, 3.0], F32), dtype=F32),
        Bounded(torch.tensor([-1.0, -torch.inf]), torch.tensor([torch.inf, 3.0])),
        np.zeros((2, 2), F32),
        torch.zeros(2, 2),
    ),
    (
        spaces.Box(0, 255, (2, 2), np.uint8),
        Bounded(0, 255, shape=[2, 2], dtype=torch.uint8),
        np.full((2, 2, 2), 7, np.uint8),
        torch.full((2, 2, 2), 7, dtype=torch.uint8),
    ),
    (
        spaces.Discrete(5, start=-2),
        Categorical(5, shape=[1]),
        np.array([-2, 2]),
        torch.tensor([[0], [4]]),
    ),
    (
        spaces.MultiDiscrete([3, 4], start=[1, 0]),
        MultiCategorical([3, 4]),
        np.array([[1, 3], [3, 0]]),
        torch.tensor([[0, 3], [2, 0]]),
    ),
    (
        spaces.MultiBinary(3),
        Categorical(2, shape=[3], dtype=torch.int8),
        np.array([[0, 1, 1], [1, 0, 0]], np.int8),
        torch.tensor([[0, 1, 1], [1, 0, 0]], dtype=torch.int8),
    ),
]


@pytest.mark.parametrize(
    ("space", "spec", "batch", "expected"), OBSERVATION_TABLE, ids=lambda v: repr(v)[:40]
)
def test_observation_spaces_map_to_specs(
    space: Any, spec: Any, batch: Any, expected: torch.Tensor
) -> None:
    got_spec, convert = observation_mapping(space, CPU)
    assert got_spec == spec, f"{space}: {got_spec!r}"
    value = convert(batch, 2)
    assert value.dtype == expected.dtype and torch.equal(value, expected)
    got_spec.assert_is_in(value)


def test_dict_and_tuple_observations_map_to_nested_composites() -> None:
    space = spaces.Dict(
        {
            "a": spaces.Discrete(3),
            "b": spaces.Tuple((spaces.Box(0.0, 1.0, (1,), F64), spaces.MultiBinary(2))),
        }
    )
    spec, convert = observation_mapping(space, CPU)
    assert spec == Composite(
        a=Categorical(3, shape=[1]),
        b=Composite(
            {"0": Bounded(0.0, 1.0, shape=[1]), "1": Categorical(2, shape=[2], dtype=torch.int8)}
        ),
    )
    batch = {
        "a": np.array([2, 0]),
        "b": (np.array([[0.5], [1.0]]), np.array([[1, 0], [0, 0]], np.int8)),
    }
    value = convert(batch, 2)
    assert value.batch_size == torch.Size([2]) and value["b", "0"].dtype == torch.float32
    assert value["a"].tolist() == [[2], [0]] and value["b", "1"].tolist() == [[1, 0], [0, 0]]
    spec.assert_is_in(value)


def test_action_spaces_map_to_specs_and_env_actions() -> None:
    spec, convert = action_mapping(spaces.Discrete(3, start=-1), CPU)
    assert spec == Categorical(3, shape=[1])
    assert convert(torch.tensor([[0], [2]])).tolist() == [-1, 1]
    spec, convert = action_mapping(spaces.Box(-2.0, 2.0, (1,), F64), CPU)
    assert spec == Bounded(-2.0, 2.0, shape=[1])
    raw = torch.tensor([[3.0], [-0.5]])
    env_actions = convert(raw)
    assert env_actions.dtype == F64 and env_actions.tolist() == [[2.0], [-0.5]]
    assert raw.tolist() == [[3.0], [-0.5]]  # the raw sample is kept (for its log-probability)
    spec, convert = action_mapping(
        spaces.Box(np.array([-1.0, -np.inf], F32), np.array([1.0, np.inf], F32)), CPU
    )
    assert spec == Unbounded(2)  # a tanh-squashed distribution needs finite bounds
    assert convert(torch.tensor([[5.0, 5.0]])).tolist() == [[1.0, 5.0]]
    # bounds too far apart for the policy's float32: how envs often write "unbounded"
    for big in (np.finfo(F64).max, float(np.finfo(F32).max)):
        spec, convert = action_mapping(spaces.Box(-big, big, (2,), F64), CPU)
        assert spec == Unbounded(2)
        assert convert(torch.tensor([[1e3, -2.0]])).tolist() == [[1e3, -2.0]]


@pytest.mark.parametrize(
    "space",
    [
        spaces.MultiDiscrete([2, 3]),
        spaces.MultiBinary(2),
        spaces.Dict({"a": spaces.Discrete(2)}),
        spaces.Box(0, 3, (1,), np.int64),
    ],
)
def test_an_action_space_no_policy_serves_is_an_error_naming_it(space: Any) -> None:
    with pytest.raises(UnsupportedSpaceError, match=f"action space {type(space).__name__}"):
        action_mapping(space, CPU)


def test_an_observation_space_without_a_spec_is_an_error_naming_it() -> None:
    with pytest.raises(UnsupportedSpaceError, match=r"observation space Text\("):
        observation_mapping(spaces.Dict({"name": spaces.Text(5)}), CPU)


# ---------------------------------------------------------------------------- configs
def pendulum_rollout(env: Any, steps: int, params: dict[str, float], seed: int) -> None:
    """Step ``env`` (just reset for the first time) and N Pendulums with ``params`` set on their
    unwrapped envs and reset by hand, comparing observations."""
    references = [gymnasium.make("Pendulum-v1", max_episode_steps=10) for _ in range(env.num_envs)]
    for i, reference in enumerate(references):
        for name, value in params.items():
            setattr(reference.unwrapped, name, value)
        reference.reset(seed=seed + i)
    actions = torch.full((env.num_envs, 1), 1.5)
    for t in range(steps):
        out = env.step(actions)
        for i, reference in enumerate(references):
            obs, _, terminated, truncated, _ = reference.step(np.array([1.5], F32))
            if terminated or truncated:
                obs, _ = reference.reset()
            assert torch.equal(out["obs"][i], torch.from_numpy(obs)), (
                f"copy {i} differs at step {t} ({params})"
            )


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_config_is_set_on_every_copy_kept_across_auto_resets_and_restored(mode: str) -> None:
    env = gymnasium_env("Pendulum-v1", vectorization_mode=mode, seed=7, max_episode_steps=10)(2)
    try:
        env.reset(config={"g": 2.5, "max_speed": 6.0})
        assert env.vector_env.get_attr("g") == (2.5, 2.5)
        pendulum_rollout(
            env, 25, {"g": 2.5, "max_speed": 6.0}, seed=7
        )  # auto-resets at steps 10 and 20
        assert env.vector_env.get_attr("g") == (2.5, 2.5)
        env.reset()  # config=None: the env's own parameters again
        assert env.vector_env.get_attr("g") == (10.0, 10.0) and env.vector_env.get_attr(
            "max_speed"
        ) == (8, 8)
        with pytest.raises(
            EnvConfigError,
            match=r"Pendulum-v1 has no config parameter\(s\) \['gravity'\]; valid: .*'g'",
        ):
            env.reset(config={"gravity": 1.0, "g": 3.0})
        assert env.vector_env.get_attr("g") == (10.0, 10.0)  # nothing was changed
    finally:
        env.close()


def test_constructor_config_is_the_default_and_class_attributes_come_back_exactly() -> None:
    Acrobot = gymnasium_env("Acrobot-v1", seed=0)
    with pytest.raises(EnvConfigError, match="LINK_MAS_1"):
        Acrobot(2, config={"LINK_MAS_1": 2.0})
    env = Acrobot(2, config={"LINK_LENGTH_1": 1.5})
    try:
        env.reset(config={"LINK_MASS_1": 2.0})
        unwrapped = env.vector_env.envs[1].unwrapped
        assert (unwrapped.LINK_MASS_1, unwrapped.LINK_LENGTH_1) == (2.0, 1.5)
        env.reset()
        assert (unwrapped.LINK_MASS_1, unwrapped.LINK_LENGTH_1) == (1.0, 1.5)
        assert "LINK_MASS_1" not in vars(unwrapped)  # the class attribute again, not a copy of it
        assert (
            env.default_config["LINK_MASS_1"] == 1.0 and env.default_config["LINK_LENGTH_1"] == 1.0
        )
    finally:
        env.close()


MUJOCO_CONFIG = {"model.opt.gravity": [0.0, 0.0, -12.0], "model.body_mass[1]": 5.0}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_config_paths_set_mujoco_physics_on_every_copy_across_auto_resets_and_restore_it(mode: str) -> None:
    pytest.importorskip("mujoco")
    env = gymnasium_env("InvertedPendulum-v5", vectorization_mode=mode, seed=3)(2)
    references = [gymnasium.make("InvertedPendulum-v5") for _ in range(2)]
    built = references[0].unwrapped.model
    gravity, masses = built.opt.gravity.copy(), built.body_mass.copy()
    for reference in references:
        reference.unwrapped.model.opt.gravity[:] = [0.0, 0.0, -12.0]
        reference.unwrapped.model.body_mass[1] = 5.0
    try:
        obs = env.reset(config=MUJOCO_CONFIG)
        assert_rows_equal(obs, [r.reset(seed=3 + i)[0] for i, r in enumerate(references)], "reset")
        resets = 0
        for t in range(40):  # the pole falls within ~10 steps: auto-resets keep the physics
            out = env.step(torch.full((2, 1), 1.0))
            rows = []
            for reference in references:
                row, _, terminated, truncated, _ = reference.step(np.array([1.0], F32))
                if terminated or truncated:
                    row, _ = reference.reset()
                    resets += 1
                rows.append(row)
            assert_rows_equal(out["obs"], rows, f"obs at step {t}")
        assert resets >= 4
        for model in env.vector_env.get_attr("model"):
            assert model.opt.gravity.tolist() == [0.0, 0.0, -12.0] and model.body_mass[1] == 5.0
        env.reset()  # config=None: the physics the env was built with
        for model in env.vector_env.get_attr("model"):
            assert np.array_equal(model.opt.gravity, gravity) and np.array_equal(model.body_mass, masses)
        with pytest.raises(EnvConfigError, match=r"InvertedPendulum-v5 has no config path\(s\) "
                           r"\['model.opt.gravty'\]: 'model.opt.gravty': AttributeError"):
            env.reset(config={"model.opt.gravty": [0.0, 0.0, -1.0], "model.body_mass[1]": 5.0})
        with pytest.raises(EnvConfigError, match=r"\['model.body_mass\[7\]'\]: .*IndexError"):
            env.reset(config={"model.body_mass[7]": 5.0})
        with pytest.raises(ValueError, match=r"InvertedPendulum-v5: config 'model.opt.gravity' has "
                           r"shape \(3,\), received \(2,\)"):
            env.reset(config={"model.opt.gravity": [0.0, -12.0]})
        for model in env.vector_env.get_attr("model"):  # nothing was changed
            assert np.array_equal(model.opt.gravity, gravity) and np.array_equal(model.body_mass, masses)
        assert env.step(torch.zeros(2, 1))["obs"].shape == (2, 4)
    finally:
        env.close()


def test_config_paths_into_a_classic_control_env_never_change_its_class() -> None:
    from gymnasium.envs.classic_control.acrobot import AcrobotEnv

    config = {"AVAIL_TORQUE[2]": 2.5, "LINK_MASS_1": 1.5}
    env = gymnasium_env("Acrobot-v1", seed=0, max_episode_steps=10)(2, config={"AVAIL_TORQUE[0]": -2.5})
    references = [gymnasium.make("Acrobot-v1", max_episode_steps=10) for _ in range(2)]
    for reference in references:
        reference.unwrapped.AVAIL_TORQUE, reference.unwrapped.LINK_MASS_1 = [-2.5, 0.0, 2.5], 1.5
    try:
        obs = env.reset(config=config)
        assert_rows_equal(obs, [r.reset(seed=i)[0] for i, r in enumerate(references)], "reset")
        for t in range(25):  # truncated every 10 steps
            out = env.step(torch.full((2, 1), 2))
            rows = []
            for reference in references:
                row, _, terminated, truncated, _ = reference.step(2)
                rows.append(reference.reset()[0] if terminated or truncated else row)
            assert_rows_equal(out["obs"], rows, f"obs at step {t}")
        assert AcrobotEnv.AVAIL_TORQUE == [-1.0, 0.0, 1]  # each copy's own list was changed
        env.reset()  # the constructor's config stays
        assert env.vector_env.get_attr("AVAIL_TORQUE") == ([-2.5, 0.0, 1], [-2.5, 0.0, 1])
        assert env.vector_env.get_attr("LINK_MASS_1") == (1.0, 1.0)
        with pytest.raises(EnvConfigError, match=r"has no config path\(s\) \['AVAIL_TORQUE\[3\]'\]"):
            env.reset(config={"AVAIL_TORQUE[3]": 1.0})
        with pytest.raises(EnvConfigError, match=r"has no config path\(s\) \['LINK_MASS_1\.x'\]"):
            env.reset(config={"LINK_MASS_1.x": 1.0})
    finally:
        env.close()


def test_eval_under_another_config_then_training_under_the_own_one(experiment_name: str) -> None:
    algorithm = Algorithm(
        gymnasium_env("Pendulum-v1", seed=0),
        num_envs=2,
        horizon=20,
        horizons_per_env_reset=1,
        seed=0,
    )
    with Trainer(
        algorithm, experiment_name=experiment_name, progress=False, save_policy=False
    ) as trainer:
        trainer.step()
        stats = trainer.eval(env_config={"g": 2.0}, name="low_gravity")
        assert algorithm.env.vector_env.get_attr("g") == (2.0, 2.0)
        assert stats["eval/low_gravity/env/resets"] == 2.0
        trainer.step()  # resets under the env's own config
        assert algorithm.env.vector_env.get_attr("g") == (10.0, 10.0)


def test_ranks_under_torchrun_get_their_own_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    env = gymnasium_env(DICT_WALK_ID, seed=10)(3)
    try:
        env.reset()
        assert env.vector_env.get_attr("seed_used") == (16, 17, 18)  # 10 + 2 * 3 + i
        env.reset()
        assert env.vector_env.get_attr("seed_used") == (
            None,
            None,
            None,
        )  # later resets do not reseed
    finally:
        env.close()


# ---------------------------------------------------------------------------- render
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_render_gives_copy_zeros_frame_and_only_copy_zero_renders(mode: str) -> None:
    env = gymnasium_env(DICT_WALK_ID, vectorization_mode=mode, seed=3)(3)
    try:
        env.reset()
        assert env.vector_env.get_attr("render_mode") == ("rgb_array", None, None)
        env.step(torch.tensor([[2], [0], [1]]))
        frame = env.render()
        assert frame.dtype == np.uint8 and frame.shape == (8, 12, 3)
        x = env.vector_env.get_attr("position")[0][0]
        assert frame[0, 0, 0] == int(127 * (x + 1))
    finally:
        env.close()


def test_a_classic_control_env_renders_with_pygame_and_says_so_without() -> None:
    env = gymnasium_env("CartPole-v1", vectorization_mode="async", seed=0)(2)
    try:
        env.reset()
        if importlib.util.find_spec("pygame") is None:
            with pytest.raises(
                NotImplementedError, match="CartPole-v1: copy 0 cannot render: .*pygame"
            ):
                env.render()
        else:
            assert env.render().shape == (400, 600, 3)
        assert env.step(torch.zeros(2, 1, dtype=torch.long))["obs"].shape == (2, 4)  # still usable
    finally:
        env.close()


def test_rollout_videos_of_a_gymnasium_env_leave_no_worker(experiment_name: str) -> None:
    algorithm = Algorithm(
        gymnasium_env(DICT_WALK_ID, vectorization_mode="async"), num_envs=2, horizon=8, seed=0
    )
    with Trainer(
        algorithm, experiment_name=experiment_name, progress=False, save_policy=False
    ) as trainer:
        trainer.step()
        before = multiprocessing.active_children()
        assert trainer.record_video(max_steps=20).startswith("videos/rollout/step_16")
        assert multiprocessing.active_children() == before, "the one-copy video env is closed"


@pytest.mark.skipif(
    importlib.util.find_spec("pygame") is not None, reason="pygame renders CartPole"
)
def test_without_the_renderer_training_goes_on_without_videos(experiment_name: str) -> None:
    from rl8lite.conditions import HitsUpperBound

    algorithm = Algorithm(gymnasium_env("CartPole-v1"), num_envs=2, horizon=8, seed=0)
    with Trainer(
        algorithm, experiment_name=experiment_name, progress=False, save_policy=False
    ) as trainer:
        with pytest.warns(RuntimeWarning, match="no rollout videos: .*cannot render: .*pygame"):
            trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 2)], steps_per_video=1)
        assert trainer.state["algorithm/steps"] == 2


def test_frames_no_video_holds_are_a_warning_and_the_run_ends_with_its_policy(
    experiment_name: str, client: Any
) -> None:
    from rl8lite.conditions import HitsUpperBound

    from .gymnasium_envs import BadFrames

    algorithm = Algorithm(gymnasium_env(BadFrames), num_envs=2, horizon=8, seed=0)
    with Trainer(algorithm, experiment_name=experiment_name, progress=False) as trainer:
        with pytest.warns(RuntimeWarning, match="no rollout videos: .*float64 .*array"):
            trainer.run(stop_conditions=[HitsUpperBound("algorithm/steps", 2)], steps_per_video=1)
        run_id, experiment_id = trainer.tracker.run_id, trainer.tracker.experiment_id
    # the policy is logged at the end, after the final video failed
    (model,) = client.search_logged_models([experiment_id])
    assert model.source_run_id == run_id
    assert client.get_run(run_id).info.status == "FINISHED"


def test_options_the_env_or_the_vector_env_does_not_take_are_errors_naming_them() -> None:
    with pytest.raises(TypeError, match=r"CartPole-v1 .* takes no keyword 'max_episode_stepz'; it takes \[.*'max_episode_steps'"):
        gymnasium_env("CartPole-v1", max_episode_stepz=30)
    with pytest.raises(TypeError, match=r"vector_kwargs \['bogus'\] are not options of SyncVectorEnv"):
        gymnasium_env("CartPole-v1", vector_kwargs={"bogus": 1})
    with pytest.raises(TypeError, match=r"vector_kwargs \['copy'\]: rl8lite sets these itself"):
        gymnasium_env("CartPole-v1", vector_kwargs={"copy": True})
    with pytest.raises(TypeError, match="the factory make_dict_walk takes no keyword 'size'"):
        gymnasium_env(make_dict_walk, size=3)
    assert gymnasium_env("CartPole-v1", vectorization_mode="async", vector_kwargs={"context": "spawn"})
    from rl8lite.trainers.train_config import TrainConfigError  # a config file's one-line error

    with pytest.raises(TrainConfigError, match="env_cls .* takes no keyword 'max_episode_stepz'"):
        TrainConfig(env_cls={"gymnasium": "CartPole-v1", "max_episode_stepz": 30})


def test_render_without_rgb_array_says_how_to_get_it() -> None:
    env = gymnasium_env(DICT_WALK_ID, render_mode=None)(1)
    try:
        with pytest.raises(NotImplementedError, match="render_mode='rgb_array'"):
            env.render()
    finally:
        env.close()


# ---------------------------------------------------------------------------- naming
def make_dict_walk(step_size: float = 0.3, render_mode: str | None = None) -> DictWalk:
    return DictWalk(render_mode=render_mode, step_size=step_size)


def test_equal_calls_give_one_class_named_after_the_env_and_configs_name_it() -> None:
    Acrobot = gymnasium_env("Acrobot-v1", vectorization_mode="async", max_episode_steps=300)
    assert Acrobot is gymnasium_env("Acrobot-v1", vectorization_mode="async", max_episode_steps=300)
    assert Acrobot is not gymnasium_env("Acrobot-v1", max_episode_steps=300)
    assert (Acrobot.__name__, Acrobot.max_episode_steps) == ("Acrobot-v1", 300)
    reference = env_reference(Acrobot)
    assert reference == {
        "gymnasium": "Acrobot-v1",
        "vectorization_mode": "async",
        "max_episode_steps": 300,
    }
    assert import_env_class(reference) is Acrobot
    assert import_env_class("gymnasium:Acrobot-v1") is gymnasium_env("Acrobot-v1")
    Walk = gymnasium_env(make_dict_walk, step_size=0.5)
    assert Walk.__name__ == "make_dict_walk" and Walk.render_kwargs == {"render_mode": "rgb_array"}
    assert env_reference(Walk) == {
        "gymnasium_factory": f"{__name__}.make_dict_walk",
        "vectorization_mode": "sync",
        "step_size": 0.5,
    }
    assert import_env_class(env_reference(Walk)) is Walk


def test_a_class_without_a_plain_reference_works_but_cannot_be_named() -> None:
    factory = lambda: DictWalk()
    Walk = gymnasium_env(factory)
    assert Walk is gymnasium_env(factory)  # the same factory object and options
    assert Walk is not gymnasium_env(factory, vectorization_mode="async")
    assert Walk is not gymnasium_env(lambda: DictWalk())
    with pytest.raises(ImportError, match="cannot be named in a config or checkpoint"):
        env_reference(Walk)
    env = Walk(1)
    try:
        assert env.reset()["position"].shape == (1, 2)
    finally:
        env.close()


def test_factories_a_dotted_path_cannot_tell_apart_get_classes_of_their_own() -> None:
    from .gymnasium_envs import Maker, narrow_env, wide_env

    for first, second, sizes in [(narrow_env, wide_env, (2, 7)), (Maker(5).make, Maker(9).make, (5, 9))]:
        classes = gymnasium_env(first), gymnasium_env(second)
        assert classes[0] is not classes[1]
        for cls, size in zip(classes, sizes):
            assert cls.reference is None  # no path imports back to this very factory
            env = cls(1)
            try:
                assert env.observation_spec.shape == (size,)
            finally:
                env.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_factorys_env_reports_the_time_limit_among_its_wrappers(mode: str) -> None:
    from .gymnasium_envs import make_normalized

    Normalized = gymnasium_env(make_normalized, vectorization_mode=mode)
    assert Normalized.max_episode_steps is None  # no copy is built before the env is
    for cls, limit in [(Normalized, 500), (gymnasium_env(make_dict_walk), None),
                       (gymnasium_env(make_normalized, max_episode_steps=30), 30)]:
        env = cls(2)
        try:
            assert env.max_episode_steps == limit, cls
        finally:
            env.close()


def test_env_label_names_a_factory_where_it_lives() -> None:
    from rl8lite.env import env_label

    from .gymnasium_envs import make_normalized

    def make_local(**kwargs: Any) -> Any:
        return make_normalized(**kwargs)

    assert env_label(gymnasium_env(make_local, seed=2)) == (
        f"{{'gymnasium_factory': '{__name__}.{make_local.__qualname__}', 'vectorization_mode': 'sync', 'seed': 2}}"
    )
    make_local.__module__ = "__main__"  # as a factory defined in a script
    make_local.__qualname__ = "make_normalized"
    assert env_label(gymnasium_env(make_local)) == (
        "{'gymnasium_factory': '__main__.make_normalized', 'vectorization_mode': 'sync'}"
    )
    Walk = gymnasium_env(make_dict_walk, step_size=0.5)
    assert env_label(Walk) == repr(env_reference(Walk))


def test_the_dummy_envs_old_dotted_path_still_imports() -> None:
    from rl8lite.env import DiscreteDummyEnv

    assert import_env_class("rl8lite.env.dummy.DiscreteDummyEnv") is DiscreteDummyEnv  # old checkpoints


def test_max_episode_steps_none_keeps_the_registered_limit() -> None:
    assert gymnasium_env("CartPole-v1", max_episode_steps=None).max_episode_steps == 500


@pytest.mark.parametrize(
    ("arguments", "error", "match"),
    [
        (
            (("CartPol-v1",), {}),
            ValueError,
            r"no Gymnasium env 'CartPol-v1'.*Did you mean: `CartPole`",
        ),
        (
            (("CartPole-v1",), {"vectorization_mode": "threads"}),
            ValueError,
            "'sync' or 'async', received 'threads'",
        ),
        ((("CartPole-v1",), {"seed": -1}), ValueError, "seed must be an int >= 0"),
        (((3,), {}), TypeError, "an env id or a callable, received 3"),
    ],
)
def test_bad_arguments_are_errors_naming_them(arguments: Any, error: type, match: str) -> None:
    args, kwargs = arguments
    with pytest.raises(error, match=match):
        gymnasium_env(*args, **kwargs)


def test_train_configs_name_gymnasium_envs_by_id_or_by_their_options(tmp_path: Any) -> None:
    assert TrainConfig("gymnasium:CartPole-v1").env_cls is gymnasium_env("CartPole-v1")
    path = tmp_path / "acrobot.yaml"
    path.write_text(
        "env_cls:\n  gymnasium: Acrobot-v1\n  vectorization_mode: async\n"
        "algorithm_config: {num_envs: 2, horizon: 4}\n"
    )
    assert TrainConfig.from_file(path).env_cls is gymnasium_env(
        "Acrobot-v1", vectorization_mode="async"
    )
    path.write_text("env_cls: {gymnasium: Acrobot-v1, gymnasium_factory: x.y}\n")
    with pytest.raises(ValueError, match=r"acrobot.yaml: env_cls .*exactly one of 'gymnasium'"):
        TrainConfig.from_file(path)
    path.write_text("env_cls: gymnasium:Acrobt-v1\n")
    with pytest.raises(ValueError, match=r"acrobot.yaml: .*no Gymnasium env 'Acrobt-v1'"):
        TrainConfig.from_file(path)


def test_a_checkpoint_names_the_class_and_resumes_with_a_fresh_reset(experiment_name: str) -> None:
    Walk = gymnasium_env(make_dict_walk, vectorization_mode="async", seed=5, step_size=0.2)
    algorithm = Algorithm(Walk, num_envs=2, horizon=8, seed=0)
    with Trainer(algorithm, experiment_name=experiment_name, progress=False) as trainer:
        trainer.step()
        trainer.eval(env_config={"step_size": 0.4}, name="long_steps")
        trainer.step()
        path = trainer.save_checkpoint()
    processes = algorithm.env.vector_env.processes
    assert all(p.exitcode is not None for p in processes), "leaving the with block ends the workers"
    with Trainer.from_checkpoint(path, progress=False) as resumed:
        assert resumed.algorithm.env_cls is Walk and resumed.state == trainer.state
        for key, value in algorithm.policy.state_dict().items():
            assert torch.equal(resumed.algorithm.policy.state_dict()[key], value), key
        stats = resumed.step()
        assert stats["env/resets"] == 2.0, (
            "the copies' states are not in the checkpoint: the env resets"
        )
        assert resumed.algorithm.env.vector_env.get_attr("step_size") == (0.2, 0.2)
    assert all(p.exitcode is not None for p in resumed.algorithm.env.vector_env.processes)


def test_the_cli_trains_a_gymnasium_env_named_in_yaml_and_leaves_no_worker(
    tmp_path: Any, experiment_name: str, client: Any
) -> None:
    import multiprocessing

    from rl8lite.cli import main

    path = tmp_path / "config.yaml"
    path.write_text(
        "env_cls: {gymnasium: CartPole-v1, vectorization_mode: async}\n"
        "algorithm_config: {num_envs: 2, horizon: 8, seed: 0}\n"
    )
    assert multiprocessing.active_children() == []
    status = main(
        [
            "train",
            "-f",
            str(path),
            "--max-steps",
            "32",
            "--experiment-name",
            experiment_name,
            "--no-progress",
        ]
    )
    assert status == 0
    assert multiprocessing.active_children() == [], "no worker process outlives the command"
    (run,) = client.search_runs([client.get_experiment_by_name(experiment_name).experiment_id])
    assert (
        run.data.params["env_cls"] == "{'gymnasium': 'CartPole-v1', 'vectorization_mode': 'async'}"
    )
    assert run.data.metrics["env/steps"] == 32
