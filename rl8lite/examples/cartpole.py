"""Batched CartPole with Gymnasium ``CartPole-v1``'s dynamics, rewards and episode rules."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from tensordict import TensorDict

from ..data import DataKeys, Device
from ..env import Env, apply_env_config
from ..specs import Categorical, Unbounded

DEFAULTS: dict[str, Any] = {
    "gravity": 9.8,
    "cart_mass": 1.0,
    "pole_mass": 0.1,
    "length": 0.5,  # half the pole's length
    "force_mag": 10.0,
    "tau": 0.02,  # seconds between state updates
    "theta_threshold": 12 * 2 * math.pi / 360,
    "x_threshold": 2.4,
    "max_episode_steps": 500,
}


class CartPole(Env):
    """Balance a pole on a cart: ``N`` copies, each resetting itself when its episode ends.

    Observation ``[x, x_dot, theta, theta_dot]``; action 0 pushes left, 1 pushes
    right; reward 1 per step. An episode terminates when the pole passes 12
    degrees or the cart leaves ±2.4, and is truncated after 500 steps. Physical
    parameters (rl8's names) are set with ``reset(config={...})``.

    Examples:
        >>> from rl8lite.examples import CartPole
        >>> env = CartPole(4)
        >>> env.reset(config={"length": 1.0}).shape
        torch.Size([4, 4])
        >>> sorted(env.step(torch.ones(4, 1, dtype=torch.long)).keys())
        ['final_obs', 'obs', 'rewards', 'terminated', 'truncated']
    """

    max_episode_steps: ClassVar[int] = DEFAULTS["max_episode_steps"]

    def __init__(
        self,
        num_envs: int,
        /,
        horizon: int | None = None,
        *,
        config: dict[str, Any] | None = None,
        device: Device = "cpu",
    ) -> None:
        super().__init__(num_envs, horizon, config=config, device=device)
        self.observation_spec = Unbounded(4, device=self.device)
        self.action_spec = Categorical(2, shape=[1], device=self.device)
        self.params = apply_env_config(type(self).__name__, DEFAULTS, self.config)
        self.state = torch.zeros(num_envs, 4, device=self.device)
        self.elapsed = torch.zeros(num_envs, 1, dtype=torch.long, device=self.device)

    def _initial_states(self, count: int) -> torch.Tensor:
        return torch.empty(count, 4, device=self.device).uniform_(-0.05, 0.05)

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        self.params = apply_env_config(type(self).__name__, {**DEFAULTS, **self.config}, config)
        self.state = self._initial_states(self.num_envs)
        self.elapsed = torch.zeros(self.num_envs, 1, dtype=torch.long, device=self.device)
        return self.state.clone()

    def step(self, action: torch.Tensor) -> TensorDict:
        p = self.params
        x, x_dot, theta, theta_dot = self.state.unbind(-1)
        force = (2 * action.reshape(-1) - 1).to(self.state.dtype) * p["force_mag"]
        total_mass = p["pole_mass"] + p["cart_mass"]
        pole_mass_length = p["pole_mass"] * p["length"]
        cos, sin = torch.cos(theta), torch.sin(theta)
        # https://coneural.org/florian/papers/05_cart_pole.pdf
        temp = (force + pole_mass_length * theta_dot.square() * sin) / total_mass
        theta_acc = (p["gravity"] * sin - cos * temp) / (
            p["length"] * (4.0 / 3.0 - p["pole_mass"] * cos.square() / total_mass)
        )
        x_acc = temp - pole_mass_length * theta_acc * cos / total_mass
        tau = p["tau"]
        state = torch.stack(
            (x + tau * x_dot, x_dot + tau * x_acc, theta + tau * theta_dot, theta_dot + tau * theta_acc),
            dim=-1,
        )
        self.elapsed = self.elapsed + 1
        terminated = (state[:, 0].abs() > p["x_threshold"]) | (state[:, 2].abs() > p["theta_threshold"])
        terminated = terminated[:, None]
        truncated = (self.elapsed >= p["max_episode_steps"]) & ~terminated
        done = terminated | truncated
        self.state = torch.where(done, self._initial_states(self.num_envs), state)
        self.elapsed = torch.where(done, torch.zeros_like(self.elapsed), self.elapsed)
        return TensorDict(
            {
                DataKeys.OBS: self.state,
                DataKeys.FINAL_OBS: state,
                DataKeys.REWARDS: torch.ones(self.num_envs, 1, device=self.device),
                DataKeys.TERMINATED: terminated,
                DataKeys.TRUNCATED: truncated,
            },
            batch_size=[self.num_envs],
            device=self.device,
        )
