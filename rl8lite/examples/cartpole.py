"""Batched CartPole with Gymnasium ``CartPole-v1``'s dynamics, rewards and episode rules."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDict

from ..specs import Categorical, Spec, Unbounded
from ._classic import Canvas, ClassicControl

DEFAULTS: dict[str, Any] = {
    "gravity": 9.8, "cart_mass": 1.0, "pole_mass": 0.1, "length": 0.5,  # half the pole's length
    "force_mag": 10.0, "tau": 0.02,  # seconds between state updates
    "kinematics_integrator": "euler",  # or "semi-implicit euler"
    "theta_threshold": 12 * 2 * math.pi / 360, "x_threshold": 2.4, "max_episode_steps": 500,
}


class CartPole(ClassicControl):
    """Balance a pole on a cart: ``N`` copies, each resetting itself when its episode ends.

    Observation ``[x, x_dot, theta, theta_dot]``; action 0 pushes left, 1 right; reward 1 per
    step. An episode terminates when the pole passes 12 degrees or the cart leaves ±2.4, and is
    truncated after 500 steps. Parameters: ``DEFAULTS`` (rl8's names).

    Examples:
        >>> from rl8lite.examples import CartPole
        >>> env = CartPole(4)
        >>> env.reset(config={"length": 1.0}).shape
        torch.Size([4, 4])
        >>> sorted(env.step(torch.ones(4, 1, dtype=torch.long)).keys())
        ['final_obs', 'obs', 'rewards', 'terminated', 'truncated']
    """

    defaults: ClassVar[dict[str, Any]] = DEFAULTS
    max_episode_steps: ClassVar[int] = DEFAULTS["max_episode_steps"]
    capturable: ClassVar[bool] = True

    def _specs(self) -> tuple[Spec, Spec]:
        return Unbounded(4, device=self.device), Categorical(2, shape=[1], device=self.device)

    def _initial_states(self) -> torch.Tensor:
        state = torch.empty(self.num_envs, 4, dtype=torch.float64, device=self.device)
        return state.uniform_(-0.05, 0.05)

    def step(self, action: torch.Tensor) -> TensorDict:
        p = self.params
        x, x_dot, theta, theta_dot = self.state.unbind(-1)
        force = (2 * action.reshape(-1) - 1).to(self.state.dtype) * p["force_mag"]
        total_mass = p["pole_mass"] + p["cart_mass"]
        pole_mass_length = p["pole_mass"] * p["length"]
        cos, sin = torch.cos(theta), torch.sin(theta)
        # https://coneural.org/florian/papers/05_cart_pole.pdf
        temp = (force + pole_mass_length * theta_dot.square() * sin) / total_mass
        theta_acc = ((p["gravity"] * sin - cos * temp)
                     / (p["length"] * (4.0 / 3.0 - p["pole_mass"] * cos.square() / total_mass)))
        x_acc = temp - pole_mass_length * theta_acc * cos / total_mass
        tau = p["tau"]
        if p["kinematics_integrator"] == "euler":
            x, x_dot = x + tau * x_dot, x_dot + tau * x_acc
            theta, theta_dot = theta + tau * theta_dot, theta_dot + tau * theta_acc
        else:  # semi-implicit: the positions move with the new velocities
            x_dot, theta_dot = x_dot + tau * x_acc, theta_dot + tau * theta_acc
            x, theta = x + tau * x_dot, theta + tau * theta_dot
        terminated = (x.abs() > p["x_threshold"]) | (theta.abs() > p["theta_threshold"])
        rewards = torch.ones(self.num_envs, 1, device=self.device)
        return self._transition((x, x_dot, theta, theta_dot), rewards, terminated[:, None])

    def render(self) -> np.ndarray:
        """An RGB ``uint8`` frame ``[400, 600, 3]`` of copy 0: the track, the cart and the pole."""
        p, canvas = self.params, Canvas(600, 400)
        x, _, theta, _ = self.state[0].tolist()
        scale = 600 / (2 * p["x_threshold"])
        cart_x, cart_y = 300 + x * scale, 100.0
        canvas.line((0, cart_y - 15), (600, cart_y - 15), 1, (0, 0, 0))
        left, right, bottom, top = cart_x - 25, cart_x + 25, cart_y - 15, cart_y + 15
        canvas.polygon([(left, bottom), (right, bottom), (right, top), (left, top)], (0, 0, 0))
        pole_len = scale * 2 * p["length"]
        tip = (cart_x + pole_len * math.sin(theta), cart_y + pole_len * math.cos(theta))
        canvas.line((cart_x, cart_y), tip, 10, (202, 152, 101))
        canvas.circle((cart_x, cart_y), 5, (129, 132, 203))
        return canvas.image
