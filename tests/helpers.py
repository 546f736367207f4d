"""Small envs for tests and benchmarks: an episodic counter, envs that misbehave on purpose, and
an env that stacks its own frames."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tensordict import TensorDict

from rl8lite.data import DataKeys
from rl8lite.env import DiscreteDummyEnv, Env
from rl8lite.specs import Bounded, Categorical, Unbounded


class EpisodicCounter(Env):
    """Reward 1 per step; copy i's episode lasts ``3 + i % 3`` steps and terminates."""

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, config: dict[str, Any] | None = None, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, config=config, device=device)
        self.observation_spec = Unbounded(1, device=self.device)
        self.action_spec = Categorical(2, shape=[1], device=self.device)
        self.lengths = 3 + torch.arange(num_envs, device=self.device) % 3
        self.t = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        self.t = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        return self.t[:, None].float()

    def step(self, action: torch.Tensor) -> TensorDict:
        self.t = self.t + 1
        done = self.t >= self.lengths
        self.t = torch.where(done, torch.zeros_like(self.t), self.t)
        return TensorDict(
            {
                "obs": self.t[:, None].float(),
                "rewards": torch.ones(self.num_envs, 1, device=self.device),
                "terminated": done[:, None],
                "truncated": torch.zeros(self.num_envs, 1, dtype=torch.bool, device=self.device),
            },
            batch_size=[self.num_envs],
        )


class BadEnv(DiscreteDummyEnv):
    """A dummy env whose outputs are broken in the way ``config['fault']`` says."""

    fault = "none"
    fault_at_step = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps = 0

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        obs = super().reset()
        if self.fault == "reset_shape":
            return obs[:, :0]
        return obs

    def step(self, action: torch.Tensor) -> TensorDict:
        out = super().step(action)
        self.steps += 1
        if self.steps <= self.fault_at_step:
            return out
        if self.fault == "step_shape":
            out = TensorDict({"obs": torch.zeros(self.num_envs, 3), "rewards": out["rewards"]}, batch_size=[self.num_envs])
        elif self.fault == "missing_rewards":
            del out["rewards"]
        elif self.fault == "reward_shape":
            out = TensorDict({"obs": out["obs"], "rewards": torch.zeros(self.num_envs)}, batch_size=[self.num_envs])
        elif self.fault == "nan_obs":
            obs = out["obs"].clone()
            obs[2] = float("nan")
            out["obs"] = obs
        elif self.fault == "nan_rewards":
            rewards = out["rewards"].clone()
            rewards[1] = float("inf")
            out["rewards"] = rewards
        elif self.fault == "terminated_dtype":
            out["terminated"] = torch.zeros(self.num_envs, 1)
            out["truncated"] = torch.zeros(self.num_envs, 1, dtype=torch.bool)
        return out


def bad_env(fault: str, at_step: int = 0) -> type[BadEnv]:
    return type(f"BadEnv_{fault}", (BadEnv,), {"fault": fault, "fault_at_step": at_step})


class MemoryTracker:
    """A tracker that keeps everything in memory (for tests that do not exercise MLflow)."""

    resumed = False
    run_id: str | None = None
    tracking_uri: str | None = None

    def __init__(self, checkpoint_dir: str | None = None) -> None:
        from pathlib import Path

        self.params: dict[str, Any] = {}
        self.metrics: list[tuple[int, dict[str, float]]] = []
        self.artifacts: list[tuple[str, str | None]] = []
        self.status = "RUNNING"
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None

    def log_params(self, params: dict[str, Any]) -> None:
        self.params.update(params)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.metrics.append((step, dict(metrics)))

    def log_artifact(self, path: Any, artifact_path: str | None = None) -> None:
        self.artifacts.append((str(path), artifact_path))

    def log_image(self, image: Any, *, key: str, step: int) -> None:
        pass

    def log_policy(self, policy: Any, observation_spec: Any, name: str = "policy", *, step: int = 0,
                   registered_model_name: str | None = None) -> str:
        return f"memory://{name}"

    def flush(self) -> None:
        pass

    def end(self, status: str = "FINISHED", *, message: str | None = None) -> None:
        self.status = status


class MaskedChoice(Env):
    """Dict observations with an action mask: 4 actions, only some allowed per copy.

    The reward is 1 for action 3 and 0 otherwise, but action 3 is masked out for
    even copies, so a policy must learn the best *allowed* action.
    """

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, config: dict[str, Any] | None = None, device: Any = "cpu") -> None:
        from rl8lite.specs import Composite

        super().__init__(num_envs, horizon, config=config, device=device)
        self.observation_spec = Composite(
            position=Unbounded(2, device=self.device),
            action_mask=Categorical(2, shape=[4], dtype=torch.bool, device=self.device),
        )
        self.action_spec = Categorical(4, shape=[1], device=self.device)
        mask = torch.ones(num_envs, 4, dtype=torch.bool, device=self.device)
        mask[0::2, 3] = False
        mask[:, 0] = False
        self.mask = mask

    def _obs(self) -> TensorDict:
        position = torch.randn(self.num_envs, 2, device=self.device)
        return TensorDict({"position": position, "action_mask": self.mask.clone()}, batch_size=[self.num_envs])

    def reset(self, *, config: dict[str, Any] | None = None) -> TensorDict:
        return self._obs()

    def step(self, action: torch.Tensor) -> TensorDict:
        allowed = self.mask.gather(1, action.long())
        if not bool(allowed.all()):
            raise AssertionError(f"masked action taken: {action[~allowed].tolist()}")
        rewards = (action == 3).float() + 0.5 * (action == 2).float()
        return TensorDict({"obs": self._obs(), "rewards": rewards}, batch_size=[self.num_envs])


class TinyModel(torch.nn.Module):
    """A custom model: one shared linear layer, features and value heads."""

    def __init__(self, observation_spec: Any, action_spec: Any, /, *, width: int = 8) -> None:
        super().__init__()
        self.config = {"width": width}
        self.body = torch.nn.Linear(observation_spec.shape[-1], width)
        self.features = torch.nn.Linear(width, 2 * action_spec.shape[-1])
        self.value = torch.nn.Linear(width, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = torch.tanh(self.body(obs))
        return self.features(hidden), self.value(hidden)


class CueRecall(Env):
    """Memory task: a cue (+-1) is shown at an episode's first step only; after
    ``delay`` more steps the action must name it (1 for +1, 0 for -1): reward +1
    if right, -1 if wrong, 0 at the other steps. Observations are
    ``[cue shown now (or 0), step / delay]``, so without memory the last step looks the
    same for either cue and the best expected return is 0."""

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, config: dict[str, Any] | None = None, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, config=config, device=device)
        self.delay = int(self.config.get("delay", 3))
        self.observation_spec = Unbounded(2, device=self.device)
        self.action_spec = Categorical(2, shape=[1], device=self.device)
        self.cue = torch.zeros(num_envs, device=self.device)
        self.t = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def _obs(self) -> torch.Tensor:
        shown = torch.where(self.t == 0, self.cue, torch.zeros_like(self.cue))
        return torch.stack([shown, self.t.float() / self.delay], dim=-1)

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        self.cue = torch.randint(0, 2, (self.num_envs,), device=self.device).float() * 2 - 1
        self.t = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        return self._obs()

    def step(self, action: torch.Tensor) -> TensorDict:
        last = self.t == self.delay
        right = (action[:, 0] == 1) == (self.cue > 0)
        rewards = torch.where(last, right.float() * 2 - 1, torch.zeros_like(self.cue))[:, None]
        self.t = torch.where(last, torch.zeros_like(self.t), self.t + 1)
        new_cue = torch.randint(0, 2, (self.num_envs,), device=self.device).float() * 2 - 1
        self.cue = torch.where(last, new_cue, self.cue)
        return TensorDict(
            {"obs": self._obs(), "rewards": rewards, "terminated": last[:, None],
             "truncated": torch.zeros(self.num_envs, 1, dtype=torch.bool, device=self.device)},
            batch_size=[self.num_envs],
        )


class DiesInSweepWorkers(DiscreteDummyEnv):
    """Kills its own process (SIGKILL) at its 3rd step inside an ``rl8lite sweep`` worker."""

    def step(self, action: torch.Tensor) -> TensorDict:
        import os
        import signal
        import sys

        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == 3 and "--worker" in sys.argv:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)


def train(algo: Any, updates: int) -> list[dict[str, float]]:
    """The stats of ``updates`` collects and steps of ``algo``, one dict per update."""
    return [{**algo.collect(), **algo.step()} for _ in range(updates)]


def frame_stacked(env_cls: type[Env], frames: int) -> type[Env]:
    """A subclass of ``env_cls`` (observations ``[D]``) observing its last ``frames`` observations
    ``[frames, D]``, oldest first, zeros before the episode's first (``final_obs`` likewise).

    Examples:
        >>> from rl8lite.examples import CartPole
        >>> env = frame_stacked(CartPole, 3)(2)
        >>> obs = env.reset()
        >>> obs.shape, obs[:, :2].abs().sum().item()  # two steps of padding before the first
        (torch.Size([2, 3, 4]), 0.0)
    """
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise ValueError(f"frames must be an int >= 1, received {frames!r}")

    class FrameStacked(env_cls):  # type: ignore[valid-type, misc]
        def __init__(self, num_envs: int, /, horizon: int | None = None, **kwargs: Any) -> None:
            super().__init__(num_envs, horizon, **kwargs)
            inner = self.observation_spec
            shape = [frames, *inner.shape]
            self.observation_spec = Unbounded(shape, device=self.device, dtype=inner.dtype)
            self.frames = inner.zero([num_envs, frames])

        def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
            obs = super().reset(config=config).unsqueeze(1)
            padding = obs.new_zeros(obs.shape[0], frames - 1, *obs.shape[2:])
            self.frames = torch.cat([padding, obs], dim=1)
            return self.frames

        def step(self, action: torch.Tensor) -> TensorDict:
            out = super().step(action)
            obs, last = out[DataKeys.OBS], self.frames[:, 1:]
            stacked = torch.cat([last, obs.unsqueeze(1)], dim=1)
            if DataKeys.TERMINATED in out:
                done = out[DataKeys.TERMINATED] | out[DataKeys.TRUNCATED]
                done = done.reshape(-1, 1, *[1] * (obs.dim() - 1))
                stacked[:, :-1].masked_fill_(done, 0)  # a new episode: zeros before its first
                if DataKeys.FINAL_OBS in out:
                    final = out[DataKeys.FINAL_OBS].unsqueeze(1)
                    out[DataKeys.FINAL_OBS] = torch.cat([last, final], dim=1)
            self.frames = out[DataKeys.OBS] = stacked
            return out

    FrameStacked.__name__ = FrameStacked.__qualname__ = f"{env_cls.__name__}Stacked{frames}"
    return FrameStacked


class ReachVecEnv:
    """An rsl_rl ``VecEnv`` (duck-typed: rsl_rl is not needed to use it): points in the plane
    moved by the actions toward a goal each copy draws per episode; reward minus the distance,
    ``+5`` and termination on reaching it, a time-out after ``max_episode_length`` steps. Group
    ``"policy"`` holds the point and the goal; ``"critic"``, privileged, also the time left."""

    num_actions = 2
    cfg: ClassVar[dict[str, Any]] = {}

    def __init__(self, num_envs: int, *, max_episode_length: int = 40, time_outs: bool = True, device: Any = "cpu", seed: int = 0) -> None:
        self.num_envs, self.max_episode_length, self.device = num_envs, max_episode_length, torch.device(device)
        self.time_outs = time_outs
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.point = torch.zeros(num_envs, 2, device=self.device)
        self.goal = self._draw(num_envs)

    def _draw(self, n: int) -> torch.Tensor:
        return torch.rand(n, 2, generator=self.generator, device=self.device) * 2 - 1

    def get_observations(self) -> TensorDict:
        time_left = 1 - self.episode_length_buf[:, None].float() / self.max_episode_length
        policy = torch.cat([self.point, self.goal], dim=-1)
        return TensorDict({"policy": policy, "critic": torch.cat([policy, time_left], dim=-1)}, batch_size=[self.num_envs], device=self.device)

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        self.point = (self.point + 0.1 * actions.clamp(-1, 1)).clamp(-2, 2)
        self.episode_length_buf += 1
        distance = (self.point - self.goal).norm(dim=-1)
        reached = distance < 0.1
        rewards = -distance + 5.0 * reached
        time_outs = (self.episode_length_buf >= self.max_episode_length) & ~reached
        dones = reached | time_outs
        n = int(dones.sum())
        if n:
            self.point[dones] = 0.0
            self.goal[dones] = self._draw(n)
            self.episode_length_buf[dones] = 0
        extras: dict[str, Any] = {"log": {"/distance": distance.mean()}}
        if self.time_outs:
            extras["time_outs"] = time_outs
        return self.get_observations(), rewards, dones.long(), extras


class DotImage(Env):
    """A uint8 picture (``36 x 36``; ``config["layout"]``: ``"hw"``, ``"chw"`` with 3 channels, or
    ``"hwc"``) of a dot on a row, moved one pixel left (0), not (1) or right (2); reward 1 while it
    is within 3 pixels of the centre, episodes of ``config["length"]`` (20) steps, then truncated."""

    SIDE = 36

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, config: dict[str, Any] | None = None, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, config=config, device=device)
        self.layout, self.length = self.config.get("layout", "hw"), int(self.config.get("length", 20))
        shape = {"hw": [self.SIDE, self.SIDE], "chw": [3, self.SIDE, self.SIDE], "hwc": [self.SIDE, self.SIDE, 3]}[self.layout]
        self.observation_spec = Bounded(0, 255, shape=shape, dtype=torch.uint8, device=self.device)
        self.action_spec = Categorical(3, shape=[1], device=self.device)
        self.x = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.t = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def _picture(self) -> torch.Tensor:
        frame = torch.zeros(self.num_envs, self.SIDE, self.SIDE, dtype=torch.uint8, device=self.device)
        frame[torch.arange(self.num_envs), self.SIDE // 2, self.x] = 255
        if self.layout == "chw":
            return frame[:, None].expand(-1, 3, -1, -1).contiguous()
        return frame[..., None].expand(-1, -1, -1, 3).contiguous() if self.layout == "hwc" else frame

    def reset(self, *, config: dict[str, Any] | None = None) -> torch.Tensor:
        self.x = torch.randint(0, self.SIDE, (self.num_envs,), device=self.device)
        self.t = torch.zeros_like(self.t)
        return self._picture()

    def step(self, action: torch.Tensor) -> TensorDict:
        self.x = (self.x + action[:, 0] - 1).clamp(0, self.SIDE - 1)
        self.t = self.t + 1
        rewards = ((self.x - self.SIDE // 2).abs() <= 3).float()[:, None]
        truncated = (self.t >= self.length)[:, None]
        final_obs = self._picture()
        restart = truncated[:, 0]
        self.x = torch.where(restart, torch.randint(0, self.SIDE, (self.num_envs,), device=self.device), self.x)
        self.t = torch.where(restart, 0, self.t)
        return TensorDict({"obs": self._picture(), "rewards": rewards, "terminated": torch.zeros_like(truncated),
                           "truncated": truncated, "final_obs": final_obs}, batch_size=[self.num_envs])
