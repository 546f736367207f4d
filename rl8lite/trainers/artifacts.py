"""What a trainer logs besides metrics: rollout videos of its policy, and the policy itself."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..algorithms.episode import render_episode
from ..algorithms.windowed import windows_seen
from ..tracking.export import ExportError
from ..tracking.video import check_frame, encode_video

if TYPE_CHECKING:
    from .trainer import Trainer

#: Frames per second when the env names none (``render_fps`` or ``metadata["render_fps"]``).
DEFAULT_FPS = 30


def env_fps(env: Any) -> float:
    return float(getattr(env, "render_fps", None) or getattr(env, "metadata", {}).get("render_fps") or DEFAULT_FPS)


def record_video(
    trainer: Trainer,
    *,
    env_config: dict[str, Any] | None,
    name: str | None,
    max_steps: int,
    deterministic: bool,
) -> str | None:
    """What :meth:`rl8lite.Trainer.record_video` does (see there)."""
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps must be an int >= 1, received {max_steps!r}")
    algorithm = trainer.algorithm
    if not algorithm.ranks.is_main:
        return None
    env_cls, hp = algorithm.env_cls, algorithm.hparams
    windowed = windows_seen(algorithm.policy.model, algorithm.env.observation_spec)
    if windowed:
        raise NotImplementedError(f"{windowed}: a rollout video feeds it one observation per step")
    env_kwargs: dict[str, Any] = {"device": algorithm.device}
    if hp.env_config:
        env_kwargs["config"] = dict(hp.env_config)
    try:
        frames, episode_return = render_episode(
            lambda: env_cls(1, hp.horizon, **env_kwargs), algorithm.policy, max_steps=max_steps,
            deterministic=deterministic, env_config=env_config,
        )
    except NotImplementedError as e:
        raise NotImplementedError(
            f"{env_cls.__name__} has no render(): record_video needs an RGB frame [H, W, 3] of copy 0"
            f" at every step ({e})"
        ) from None
    frames = [check_frame(frame, f"{env_cls.__name__}.render()") for frame in frames]
    steps = trainer.state["env/steps"]
    folder = f"videos/{name or 'rollout'}"
    with tempfile.TemporaryDirectory() as tmp:
        path = encode_video(frames, Path(tmp) / f"step_{steps}", fps=env_fps(env_cls))
        tracker = trainer.tracker
        if hasattr(tracker, "log_artifact"):
            tracker.log_artifact(path, folder)
        if hasattr(tracker, "log_image"):  # the poster frame: the UI's image slider steps through training
            tracker.log_image(frames[0], key=folder, step=steps)
        if hasattr(tracker, "log_metrics"):
            tracker.log_metrics({f"{folder}/return": episode_return, f"{folder}/length": float(len(frames))},
                                step=steps)
    return f"{folder}/{path.name}"


class VideoSchedule:
    """Records every ``steps_per_video`` training steps and once at the end of ``run``; an env
    without ``render()``, or whose frames are not RGB images, is a warning, once, and no more
    videos: training goes on (and the run still ends with its policy)."""

    def __init__(self, trainer: Trainer, steps_per_video: int | None) -> None:
        self.trainer, self.every = trainer, steps_per_video
        self.last_step = -1

    def after_step(self, *, final: bool = False) -> None:
        steps = self.trainer.state["algorithm/steps"]
        if self.every is None or steps == self.last_step or not (final or steps % self.every == 0):
            return
        self.last_step = steps
        try:
            self.trainer.record_video()
        except (NotImplementedError, ValueError) as e:  # no render(), or frames it cannot encode
            warnings.warn(f"no rollout videos: {e}", RuntimeWarning, stacklevel=3)
            self.every = None


def save_policy_or_warn(trainer: Trainer) -> None:
    """Log the policy at the end of a successful run, or warn and keep its weights in a
    checkpoint: failing to export it (e.g. ``torch.export`` cannot trace a custom model)
    must not fail the run, nor lose the weights. Rank 0 exports; if it failed, every rank
    writes its checkpoint."""
    reason = None
    ranks = trainer.algorithm.ranks
    if ranks.is_main:
        try:
            trainer.log_policy()
        except Exception as e:
            reason = str(e) if isinstance(e, ExportError) else f"{type(e).__name__}: {e}"
    if not ranks.agree([reason is not None])[0]:
        return
    try:
        kept = f"; the weights are in the checkpoint {trainer.save_checkpoint()}"
    except Exception as checkpoint_error:
        kept = f"; writing a checkpoint failed too ({type(checkpoint_error).__name__}: {checkpoint_error})"
    if reason is not None:
        warnings.warn(f"the policy was not saved as an MLflow model: {reason}{kept}", RuntimeWarning, stacklevel=4)
