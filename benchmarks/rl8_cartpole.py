"""rl8's own CartPole example (infinite horizon; reward = minus the state errors).

Written once against rl8's API: it runs under rl8lite or rl8 unchanged but for
the imports (rl8lite's porting rule: ``rl8`` -> ``rl8lite``, ``torchrl.data`` ->
``rl8lite.specs``), so both libraries are benchmarked on the very same env.
Dynamics, observation ``[x, x_dot, cos theta, sin theta, theta_dot]``, three
actions (push left, none, right) and the reward follow rl8's
``examples/cartpole/env.py``.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

try:  # rl8lite
    from rl8lite import Env
    from rl8lite.specs import Categorical, Unbounded
except ImportError:  # rl8 (its own venv: benchmarks/.rl8-venv)
    from rl8 import Env
    from torchrl.data import Categorical, Unbounded


class RL8CartPole(Env):
    """Swing-free cart-pole balancing; never terminates (rl8's benchmark env)."""

    max_horizon = 128

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, config: dict[str, Any] | None = None, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(5, device=device, dtype=torch.float32)
        self.action_spec = Categorical(3, shape=torch.Size([1]), device=device)
        self._configure(config or {})

    def _configure(self, config: dict[str, Any]) -> None:
        self.gravity = config.get("gravity", 9.8)
        self.cart_mass = config.get("cart_mass", 1.0)
        self.pole_mass = config.get("pole_mass", 0.1)
        self.total_mass = self.pole_mass + self.cart_mass
        self.length = config.get("length", 0.5)
        self.pole_mass_length = self.pole_mass * self.length
        self.force_mag = config.get("force_mag", 5.0)
        self.tau = config.get("tau", 0.02)

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        self._configure(config or {})
        self.state = torch.normal(0, 0.01, size=(4, self.num_envs), device=self.device)
        x, x_dot, theta, theta_dot = self.state
        return torch.vstack((x, x_dot, torch.cos(theta), torch.sin(theta), theta_dot)).T

    def step(self, action: torch.Tensor) -> TensorDict:
        x, x_dot, theta, theta_dot = self.state
        force = (action.flatten() - 1) * self.force_mag
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = (force + self.pole_mass_length * theta_dot**2 * sin) / self.total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.pole_mass * cos**2 / self.total_mass)
        )
        x_acc = temp - self.pole_mass_length * theta_acc * cos / self.total_mass
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * x_acc
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * theta_acc
        self.state = torch.vstack((x, x_dot, theta, theta_dot))
        obs = torch.vstack((x, x_dot, torch.cos(theta), torch.sin(theta), theta_dot))
        theta_error = (obs[2] - 1.0).abs() + obs[3].abs()
        other_errors = x.abs() + x_dot.abs() + theta_dot.abs()
        reward = -(theta_error + other_errors)[:, None]
        return TensorDict({"obs": obs.T, "rewards": reward}, batch_size=[self.num_envs], device=self.device)
