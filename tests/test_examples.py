"""Example envs against Gymnasium's reference implementations, step for step."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from rl8lite.env import EnvConfigError
from rl8lite.examples import CartPole, MountainCar, MountainCarContinuous, Pendulum
from rl8lite.specs import Bounded, Categorical

gymnasium = pytest.importorskip("gymnasium")

ENVS = [CartPole, Pendulum, MountainCar, MountainCarContinuous]
GYM_IDS = {
    CartPole: "CartPole-v1",
    Pendulum: "Pendulum-v1",
    MountainCar: "MountainCar-v0",
    MountainCarContinuous: "MountainCarContinuous-v0",
}
NUM_ENVS = 16


def gym_obs(ref: Any) -> np.ndarray:
    """Gymnasium's observation of a reference env's current state."""
    env = ref.unwrapped
    return env._get_obs() if hasattr(env, "_get_obs") else np.array(env.state, dtype=np.float32)


def make_references(env: Any, attrs: dict[str, Any], elapsed: dict[int, int]) -> list[Any]:
    """One Gymnasium env (with its TimeLimit) per copy, in the copy's state."""
    refs = []
    for i in range(env.num_envs):
        ref = gymnasium.make(GYM_IDS[type(env)], disable_env_checker=True)
        ref.reset(seed=i)
        for name, value in attrs.items():
            setattr(ref.unwrapped, name, value)
        ref.unwrapped.state = env.state[i].numpy().copy()
        ref._elapsed_steps = elapsed.get(i, 0)
        refs.append(ref)
    return refs


def random_actions(env: Any, generator: torch.Generator) -> torch.Tensor:
    spec = env.action_spec
    if isinstance(spec, Categorical):
        return torch.randint(0, spec.n, (env.num_envs, 1), generator=generator)
    assert isinstance(spec, Bounded)
    # a quarter of the range beyond each bound, to exercise the clipping
    low, span = spec.low - 0.25 * (spec.high - spec.low), 1.5 * (spec.high - spec.low)
    return low + span * torch.rand(env.num_envs, 1, generator=generator)


def run_against_gymnasium(
    env: Any,
    steps: int,
    *,
    attrs: dict[str, Any] | None = None,
    states: dict[int, tuple[float, ...]] | None = None,
    elapsed: dict[int, int] | None = None,
) -> dict[str, int]:
    """Step ``env`` and one Gymnasium env per copy under the same actions; assert they agree.

    ``states`` and ``elapsed`` overwrite some copies' starting state and step count.
    Returns how many copies terminated and were truncated.
    """
    elapsed = elapsed or {}
    for i, state in (states or {}).items():
        env.state[i] = torch.tensor(state, dtype=torch.float64)
    for i, count in elapsed.items():
        env.elapsed[i] = count
    refs = make_references(env, attrs or {}, elapsed)
    generator = torch.Generator().manual_seed(0)
    discrete = isinstance(env.action_spec, Categorical)
    counts = {"terminated": 0, "truncated": 0}
    for _ in range(steps):
        action = random_actions(env, generator)
        out = env.step(action)
        keys = ("final_obs", "obs", "rewards", "terminated", "truncated")
        expected: dict[str, list[Any]] = {key: [] for key in keys}
        for i, ref in enumerate(refs):
            # Gymnasium computes Pendulum's torque terms in the action's dtype; float64 is exact
            a = int(action[i, 0]) if discrete else action[i].numpy().astype(np.float64)
            obs, reward, terminated, truncated, _ = ref.step(a)
            truncated = truncated and not terminated  # terminated wins
            if terminated or truncated:
                ref.reset()
                ref.unwrapped.state = env.state[i].numpy().copy()
            expected["final_obs"].append(obs)
            expected["obs"].append(gym_obs(ref))
            expected["rewards"].append([reward])
            expected["terminated"].append([terminated])
            expected["truncated"].append([truncated])
        for key, values in expected.items():
            want = torch.as_tensor(np.array(values))
            if want.is_floating_point():
                want = want.float()
            torch.testing.assert_close(out[key], want, msg=lambda m, key=key: f"{key}: {m}")
        counts["terminated"] += int(out["terminated"].sum())
        counts["truncated"] += int(out["truncated"].sum())
    return counts


def test_cartpole_matches_gymnasium() -> None:
    torch.manual_seed(0)
    env = CartPole(NUM_ENVS)
    env.reset()
    # copy 0 leaves the track on the step its time runs out; copies 1-4 run out of time
    elapsed = {0: 499, **{i: 490 + 2 * i for i in range(1, 5)}}
    counts = run_against_gymnasium(env, 200, states={0: (2.39, 1.0, 0.0, 0.0)}, elapsed=elapsed)
    assert counts["terminated"] > 50 and counts["truncated"] >= 1


def test_pendulum_matches_gymnasium() -> None:
    torch.manual_seed(1)
    env = Pendulum(NUM_ENVS)
    env.reset()
    counts = run_against_gymnasium(env, 250, elapsed={1: 150})
    assert counts == {"terminated": 0, "truncated": NUM_ENVS + 1}


@pytest.mark.parametrize("env_cls", [MountainCar, MountainCarContinuous])
def test_mountain_car_matches_gymnasium(env_cls: type) -> None:
    torch.manual_seed(2)
    env = env_cls(NUM_ENVS)
    env.reset()
    goal = env.params["goal_position"]
    # copy 0 reaches the goal, copy 1 hits the left wall, copy 2 reaches the goal as time runs out
    states = {0: (goal - 0.05, 0.05), 1: (-1.15, -0.06), 2: (goal - 0.01, 0.05)}
    limit = env_cls.max_episode_steps
    elapsed = {2: limit - 1, 3: limit - 20, 4: limit - 100}
    counts = run_against_gymnasium(env, 200, states=states, elapsed=elapsed)
    assert counts["terminated"] >= 2 and counts["truncated"] >= 2


ALTERNATE_CONFIGS = [
    (CartPole, {"length": 1.0}, {"length": 1.0, "polemass_length": 0.1}),
    (
        CartPole,
        {"gravity": 9.0, "cart_mass": 1.5, "pole_mass": 0.2, "force_mag": 5.0, "tau": 0.01,
         "kinematics_integrator": "semi-implicit euler", "x_threshold": 1.0},
        {"gravity": 9.0, "masscart": 1.5, "masspole": 0.2, "total_mass": 1.7,
         "polemass_length": 0.2 * 0.5, "force_mag": 5.0, "tau": 0.01,
         "kinematics_integrator": "semi-implicit euler", "x_threshold": 1.0},
    ),
    (
        Pendulum,
        {"g": 9.81, "m": 1.5, "l": 0.8, "dt": 0.04, "max_speed": 6.0, "max_torque": 1.5},
        {"g": 9.81, "m": 1.5, "l": 0.8, "dt": 0.04, "max_speed": 6.0, "max_torque": 1.5},
    ),
    (
        MountainCar,
        {"force_mag": 0.002, "gravity": 0.002, "max_speed": 0.05, "goal_position": 0.2,
         "goal_velocity": 0.01, "min_position": -1.0, "max_position": 0.5},
        {"force": 0.002, "gravity": 0.002, "max_speed": 0.05, "goal_position": 0.2,
         "goal_velocity": 0.01, "min_position": -1.0, "max_position": 0.5},
    ),
    (
        MountainCarContinuous,
        {"power": 0.003, "max_speed": 0.05, "goal_position": 0.2, "goal_velocity": 0.01,
         "min_position": -1.0, "max_position": 0.5},
        {"power": 0.003, "max_speed": 0.05, "goal_position": 0.2, "goal_velocity": 0.01,
         "min_position": -1.0, "max_position": 0.5},
    ),
]


@pytest.mark.parametrize("env_cls, config, attrs", ALTERNATE_CONFIGS)
def test_alternate_configs_match_gymnasium(
    env_cls: type, config: dict[str, Any], attrs: dict[str, Any]
) -> None:
    torch.manual_seed(3)
    env = env_cls(NUM_ENVS)
    env.reset(config=config)
    states = {0: (-0.95, -0.05)} if env_cls in (MountainCar, MountainCarContinuous) else None
    run_against_gymnasium(env, 50, attrs=attrs, states=states)
    default = env_cls(NUM_ENVS)
    default.reset()
    default.state = env.state.clone()
    action = torch.ones(NUM_ENVS, 1, dtype=env.action_spec.dtype)
    assert not torch.equal(env.step(action)["final_obs"], default.step(action)["final_obs"])


def test_constructor_config_matches_gymnasium() -> None:
    torch.manual_seed(4)
    env = Pendulum(NUM_ENVS, config={"g": 3.7})
    env.reset()
    run_against_gymnasium(env, 50, attrs={"g": 3.7})


def test_reset_config_merges_over_the_constructor_config() -> None:
    env = CartPole(2, config={"length": 1.0})
    assert env.params["length"] == 1.0
    env.reset(config={"tau": 0.01})
    assert (env.params["length"], env.params["tau"]) == (1.0, 0.01)
    env.reset()
    assert (env.params["length"], env.params["tau"]) == (1.0, 0.02)


@pytest.mark.parametrize("env_cls", ENVS)
def test_unknown_config_key_is_named(env_cls: type) -> None:
    message = rf"{env_cls.__name__} has no config parameter\(s\) \['nope'\]"
    with pytest.raises(EnvConfigError, match=message):
        env_cls(2, config={"nope": 1.0})
    with pytest.raises(EnvConfigError, match=r"\['lenght'\]"):
        env_cls(2).reset(config={"lenght": 1.0})


def test_specs_and_episode_limits() -> None:
    assert (CartPole.max_episode_steps, Pendulum.max_episode_steps) == (500, 200)
    assert (MountainCar.max_episode_steps, MountainCarContinuous.max_episode_steps) == (200, 999)
    assert CartPole(2).action_spec == Categorical(2, shape=[1])
    assert MountainCar(2).action_spec == Categorical(3, shape=[1])
    assert Pendulum(2).action_spec == Bounded(-2.0, 2.0, shape=[1])
    assert MountainCarContinuous(2).action_spec == Bounded(-1.0, 1.0, shape=[1])
    for env_cls in ENVS:
        env = env_cls(3)
        obs = env.reset()
        env.observation_spec.assert_is_in(obs)
        out = env.step(env.action_spec.rand([3]))
        assert out["rewards"].dtype == torch.float32 and out["rewards"].shape == (3, 1)
        assert out["terminated"].dtype == out["truncated"].dtype == torch.bool
        assert out["obs"].dtype == out["final_obs"].dtype == torch.float32
        assert env.state.dtype == torch.float64


def test_initial_states_follow_gymnasium() -> None:
    torch.manual_seed(5)
    n = 4000
    cartpole = CartPole(n).reset()
    assert -0.05 <= cartpole.min() and cartpole.max() <= 0.05 and cartpole.std(0).min() > 0.025
    pendulum = Pendulum(n)
    pendulum.reset()
    theta, theta_dot = pendulum.state.unbind(-1)
    assert theta.abs().max() <= math.pi and theta.abs().max() > 3.1
    assert theta_dot.abs().max() <= 1.0 and theta_dot.abs().max() > 0.99
    for env_cls in (MountainCar, MountainCarContinuous):
        position, velocity = env_cls(n).reset().unbind(-1)
        assert -0.6 <= position.min() < -0.59 and -0.41 < position.max() <= -0.4
        assert bool((velocity == 0).all())


@pytest.mark.parametrize("env_cls", ENVS)
def test_render_draws_copy_zero(env_cls: type) -> None:
    torch.manual_seed(6)
    env = env_cls(2)
    env.reset()
    frame = env.render()
    assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8
    assert frame.ndim == 3 and frame.shape[2] == 3
    assert (frame != 255).any() and (frame == 255).any()
    env.state[0] = env.state[0] + 0.3
    assert not np.array_equal(env.render(), frame)
    frame = env.render()
    env.state[1] = env.state[1] + 0.3
    assert np.array_equal(env.render(), frame)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("env_cls", ENVS)
def test_runs_on_cuda(env_cls: type) -> None:
    env = env_cls(8, device="cuda")
    cpu = env_cls(8)
    cpu.reset()
    env.reset()
    env.state = cpu.state.cuda()
    for _ in range(30):
        action = env.action_spec.rand([8])
        out, cpu_out = env.step(action), cpu.step(action.cpu())
        assert all(value.device.type == "cuda" for value in out.values())
        done = (cpu_out["terminated"] | cpu_out["truncated"]).flatten()
        torch.testing.assert_close(out["final_obs"].cpu(), cpu_out["final_obs"])
        env.state[done] = cpu.state[done].cuda()
    assert env.render().shape[2] == 3
