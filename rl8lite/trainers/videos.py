"""Rollout videos: copy 0 of an env filmed while the policy acts, encoded and logged.

:class:`Filming` watches a rollout step by step (``Rollout.observer``) and keeps copy 0's
``render()`` frames of one episode: the training env during ordinary collects (no extra env
steps, as Isaac Lab's video wrapper does), or an evaluation-style rollout of it.
:func:`film_policy` steps an env instance or the training env (its state restored after).
:func:`log_video` encodes the frames and logs them to the run with a poster frame and the
episode's return and length.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..algorithms import Algorithm
from ..data import DataKeys
from ..env import Env
from ..policies import Policy
from ..runtime.checkpoint_files import capture_rng, restore_rng
from ..tracking import Tracker
from ..tracking.video import check_frame, encode_video

#: Frames per second when the env names none (``render_fps`` or ``metadata["render_fps"]``).
DEFAULT_FPS = 30


def env_fps(env: Any) -> float:
    fps = getattr(env, "render_fps", None) or getattr(env, "metadata", {}).get("render_fps")
    return float(fps or DEFAULT_FPS)


class Filming:
    """Copy 0's frames of one episode: :meth:`start` takes the first, then call it after every
    env step of the rollout with the step's output.

    With ``from_next_episode`` filming starts when copy 0's current episode ends (at once for
    an env that reports no episode ends). It is :attr:`done` when the filmed episode ends or
    after ``max_steps`` frames.
    """

    def __init__(self, env: Env, max_steps: int, *, from_next_episode: bool = False) -> None:
        self.env, self.max_steps, self.waiting = env, max_steps, from_next_episode
        self.frames: list[np.ndarray] = []
        self.episode_return = 0.0
        self.done = False
        #: Why filming stopped without a video (no ``render()``, frames that are not RGB images).
        self.error: Exception | None = None

    def start(self) -> None:
        self.waiting = False
        self._frame()

    def _frame(self) -> None:
        name = type(self.env).__name__
        try:
            self.frames.append(check_frame(self.env.render(), f"{name}.render()"))
        except ValueError as e:
            self.error, self.done = e, True
        except NotImplementedError as e:
            self.error = NotImplementedError(f"{name} has no render(): videos need an RGB frame"
                                             f" [H, W, 3] of copy 0 at every step ({e})")
            self.done = True

    def __call__(self, out: Any) -> None:
        if self.done:
            return
        keys = (DataKeys.TERMINATED, DataKeys.TRUNCATED)
        flags = [out[key][0, 0] for key in keys if key in out.keys()]
        ended = bool(torch.stack(flags).any()) if flags else False
        if self.waiting:
            if ended or not flags:  # copy 0 has just started an episode (it resets itself)
                self.start()
            return
        self.episode_return += float(out[DataKeys.REWARDS][0, 0])
        if not ended:
            self._frame()
        self.done = self.done or ended or len(self.frames) >= self.max_steps


def film_policy(algorithm: Algorithm, env: Env | None, *, max_steps: int, deterministic: bool,
                env_config: dict[str, Any] | None) -> Filming:
    """Film ``env`` (default: the training env, its state restored after, or a reset requested
    where it cannot restore it) with the algorithm's policy (:func:`film_instance`)."""
    saved = algorithm.env.state_dict() if env is None and algorithm.env.restores_state else None
    try:
        return film_instance(env if env is not None else algorithm.env, algorithm.policy,
                             max_steps=max_steps, deterministic=deterministic,
                             env_config=env_config)
    finally:
        if saved is not None:
            algorithm.env.load_state_dict(saved)
        elif env is None:
            algorithm.request_env_reset()


def film_instance(env: Env, policy: Policy, *, max_steps: int, deterministic: bool,
                  env_config: dict[str, Any] | None) -> Filming:
    """Reset ``env`` under ``env_config`` and step every copy with ``policy`` until copy 0's
    episode ends or ``max_steps``, filming copy 0; every global random stream is as it was
    after."""
    filming = Filming(env, max_steps)
    rng = capture_rng()
    try:
        with torch.inference_mode():
            obs = env.reset(config=env_config)
            filming.start()
            if filming.error is not None:
                raise filming.error
            states = policy.init_states(env.num_envs) if policy.recurrent else None
            while not filming.done:
                if states is not None:
                    actions, _, _, states = policy.act_recurrent(
                        obs, states, deterministic=deterministic)
                else:
                    actions = policy.sample_actions(obs, deterministic=deterministic)[0]
                out = env.step(actions)
                obs = out[DataKeys.OBS]
                filming(out)
    finally:
        restore_rng(rng)
    return filming


def log_video(tracker: Tracker, filming: Filming, *, name: str, env_steps: int) -> str:
    """Encode the filmed frames (H.264 MP4 with the ``video`` extra, else a GIF), log them as
    ``videos/<name>/step_<env steps>``, the first frame as an image under the same key (the UI's
    image slider steps through training) and the episode's return and length; return the
    path."""
    if not filming.frames:
        raise ValueError("no frames were filmed")
    folder = f"videos/{name}"
    with tempfile.TemporaryDirectory() as tmp:
        path = encode_video(filming.frames, Path(tmp) / f"step_{env_steps}",
                            fps=env_fps(filming.env))
        tracker.log_artifact(path, folder)
        tracker.log_image(filming.frames[0], key=folder, step=env_steps)
        tracker.log_metrics({f"{folder}/return": filming.episode_return,
                             f"{folder}/length": float(len(filming.frames))}, step=env_steps)
    return f"{folder}/{path.name}"
