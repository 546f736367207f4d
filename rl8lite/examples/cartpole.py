"""Batched CartPole with Gymnasium ``CartPole-v1``'s dynamics, rewards and episode rules."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict

from ..data import DataKeys, Device
from ..env import Env, apply_env_config
from ..specs import Categorical, Unbounded
from ._render import Canvas

DEFAULTS: dict[str, Any] = {
    "gravity": 9.8,
    "cart_mass": 1.0,
    "pole_mass": 0.1,
    "length": 0.5,  # half the pole's length
    "force_mag": 10.0,
    "tau": 0.02,  # seconds between state updates
    "kinematics_integrator": "euler",  # or "semi-implicit euler"
    "theta_threshold": 12 * 2 * math.pi / 360,
    "x_threshold": 2.4,
    "max_episode_steps": 500,
}


class CartPole(Env):
    """Balance a pole on a cart: ``N`` copies, each resetting itself when its episode ends.

    Observation ``[x, x_dot, theta, theta_dot]``; action 0 pushes left, 1 pushes
    right; reward 1 per step. An episode terminates when the pole passes 12
    degrees or the cart leaves ±2.4, and is truncated after 500 steps. The state
    is kept in float64 (as Gymnasium's is) and observed as float32. Parameters
    (rl8's names, see ``DEFAULTS``) are set with ``config=`` or ``reset(config={...})``.

    Examples:
        >>> import torch
        >>> from rl8lite.examples import CartPole
        >>> env = CartPole(4)
        >>> env.reset(config={"length": 1.0}).shape
        torch.Size([4, 4])
        >>> sorted(env.step(torch.ones(4, 1, dtype=torch.long)).keys())
        ['final_obs', 'obs', 'rewards', 'terminated', 'truncated']
    """

    max_episode_steps: ClassVar[int] = DEFAULTS["max_episode_steps"]
    capturable: ClassVar[bool] = True

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
        self._reset_state()

    def _initial_states(self) -> torch.Tensor:
        state = torch.empty(self.num_envs, 4, dtype=torch.float64, device=self.device)
        return state.uniform_(-0.05, 0.05)

    def _reset_state(self) -> None:
        if hasattr(self, "state"):  # in place: a captured step (capturable) keeps reading these tensors
            self.state.copy_(self._initial_states())
            self.elapsed.zero_()
            return
        # Normal tensors even when built under inference mode: the step updates them in place.
        with torch.inference_mode(False):
            self.state = self._initial_states()
            self.elapsed = torch.zeros(self.num_envs, 1, dtype=torch.long, device=self.device)

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        self.params = apply_env_config(type(self).__name__, {**DEFAULTS, **self.config}, config)
        self._reset_state()
        return self.state.float()

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
        if p["kinematics_integrator"] == "euler":
            x, x_dot = x + tau * x_dot, x_dot + tau * x_acc
            theta, theta_dot = theta + tau * theta_dot, theta_dot + tau * theta_acc
        else:
            x_dot = x_dot + tau * x_acc
            x = x + tau * x_dot
            theta_dot = theta_dot + tau * theta_acc
            theta = theta + tau * theta_dot
        terminated = (x.abs() > p["x_threshold"]) | (theta.abs() > p["theta_threshold"])
        terminated = terminated[:, None]
        # The state is updated in place (x, ..., theta_dot are new tensors, not views of
        # it): at 65536 copies each [N, 4] float64 temporary is 2 MiB.
        torch.stack((x, x_dot, theta, theta_dot), dim=-1, out=self.state)
        final_obs = self.state.float()
        self.elapsed += 1
        truncated = (self.elapsed >= p["max_episode_steps"]) & ~terminated
        done = terminated | truncated
        torch.where(done, self._initial_states(), self.state, out=self.state)
        self.elapsed.masked_fill_(done, 0)
        return TensorDict(
            {
                DataKeys.OBS: self.state.float(),
                DataKeys.FINAL_OBS: final_obs,
                DataKeys.REWARDS: torch.ones(self.num_envs, 1, device=self.device),
                DataKeys.TERMINATED: terminated,
                DataKeys.TRUNCATED: truncated,
            },
            batch_size=[self.num_envs],
            device=self.device,
        )

    def render(self) -> np.ndarray:
        """An RGB ``uint8`` frame ``[400, 600, 3]`` of copy 0: the track, the cart and the pole."""
        p = self.params
        x, _, theta, _ = self.state[0].tolist()
        canvas = Canvas(600, 400)
        scale = 600 / (2 * p["x_threshold"])
        cart_x, cart_y = 300 + x * scale, 100.0
        canvas.line((0, cart_y - 15), (600, cart_y - 15), 1, (0, 0, 0))
        canvas.polygon(
            [(cart_x - 25, cart_y - 15), (cart_x + 25, cart_y - 15),
             (cart_x + 25, cart_y + 15), (cart_x - 25, cart_y + 15)],
            (0, 0, 0),
        )
        pole_len = scale * 2 * p["length"]
        tip = (cart_x + pole_len * math.sin(theta), cart_y + pole_len * math.cos(theta))
        canvas.line((cart_x, cart_y), tip, 10, (202, 152, 101))
        canvas.circle((cart_x, cart_y), 5, (129, 132, 203))
        return canvas.image
