"""Rollout videos: copy 0 of an env filmed while the policy acts, encoded as H.264 MP4 (PyAV, the
``video`` extra) or else as a GIF (Pillow), and logged to the run."""

from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..data import DataKeys
from ..env import Env
from ..tracking import Tracker

#: Frames per second when the env names none (``render_fps`` or ``metadata["render_fps"]``).
DEFAULT_FPS = 30
#: Frames wider than this many pixels are downscaled.
MAX_WIDTH = 640


class Filming:
    """A rollout observer filming one episode of copy 0 (with ``from_next_episode``, its next):
    :meth:`take_frame`, then a call per env step, until :attr:`done` (its end or ``max_steps``)."""

    def __init__(self, env: Env, max_steps: int, *, from_next_episode: bool = False) -> None:
        self.env, self.max_steps, self.waiting = env, max_steps, from_next_episode
        self.frames: list[np.ndarray] = []
        self.episode_return, self.done = 0.0, False
        self.error: Exception | None = None  # why filming stopped without a video

    def take_frame(self) -> None:
        """Film copy 0's current frame (the first starts the filming)."""
        self.waiting = False
        name = type(self.env).__name__
        try:
            self.frames.append(check_frame(self.env.render(), f"{name}.render()"))
        except ValueError as e:
            self.error, self.done = e, True
        except NotImplementedError as e:
            self.done, self.error = True, NotImplementedError(
                f"{name} has no render(): videos need an RGB frame [H, W, 3] at every step ({e})")

    def __call__(self, out: Any) -> None:
        if self.done:
            return
        flags = [out[k][0, 0] for k in (DataKeys.TERMINATED, DataKeys.TRUNCATED) if k in out.keys()]
        ended = bool(torch.stack(flags).any()) if flags else False
        if self.waiting:
            if ended or not flags:  # copy 0 has just started an episode (it resets itself)
                self.take_frame()
            return
        self.episode_return += float(out[DataKeys.REWARDS][0, 0])
        if not ended:
            self.take_frame()
        self.done = self.done or ended or len(self.frames) >= self.max_steps


def log_video(tracker: Tracker, filming: Filming, *, name: str, env_steps: int) -> str:
    """Log the frames (MP4 with the ``video`` extra, else GIF) as ``videos/<name>/step_<steps>``,
    the first as an image, and the episode's return and length; return the artifact's path."""
    if filming.error is not None:
        raise filming.error
    if not filming.frames:
        raise ValueError("no frames were filmed")
    env, folder = filming.env, f"videos/{name}"
    fps = getattr(env, "render_fps", None) or getattr(env, "metadata", {}).get("render_fps")
    with tempfile.TemporaryDirectory() as tmp:
        path = encode_video(filming.frames, Path(tmp) / f"step_{env_steps}",
                            fps=float(fps or DEFAULT_FPS))
        tracker.log_artifact(path, folder)
        tracker.log_image(filming.frames[0], key=folder, step=env_steps)
        tracker.log_metrics({f"{folder}/return": filming.episode_return,
                             f"{folder}/length": float(len(filming.frames))}, step=env_steps)
    return f"{folder}/{path.name}"


def check_frame(frame: object, where: str) -> np.ndarray:
    """``frame`` as an RGB ``uint8`` array ``[H, W, 3]``, else a ``ValueError`` naming ``where``."""
    array = np.asarray(frame)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[-1] != 3:
        raise ValueError(f"{where} must return an RGB uint8 array [H, W, 3], received"
                         f" {array.dtype} of shape {list(array.shape)}")
    return array


def downscale(frame: np.ndarray, max_width: int = MAX_WIDTH) -> np.ndarray:
    """``frame`` at most ``max_width`` wide (aspect ratio kept), sides even (H.264's 4:2:0)."""
    from PIL import Image
    height, width = frame.shape[:2]
    scale = min(1.0, max_width / width)
    size = (max(2, int(width * scale) // 2 * 2), max(2, int(height * scale) // 2 * 2))
    if size == (width, height):
        return frame
    return np.asarray(Image.fromarray(frame).resize(size, Image.Resampling.BILINEAR))


def mp4_available() -> bool:
    """Whether PyAV is installed (MP4); else videos are GIFs."""
    return importlib.util.find_spec("av") is not None


def encode_video(frames: Sequence[np.ndarray], stem: str | Path, *, fps: float) -> Path:
    """Write ``frames`` to ``<stem>.mp4`` (H.264), or ``<stem>.gif`` without PyAV; return it."""
    frames = [downscale(frame) for frame in frames]
    if not mp4_available():
        from PIL import Image
        path, images = Path(f"{stem}.gif"), [Image.fromarray(frame) for frame in frames]
        duration_ms = max(20, round(1000 / fps))  # browsers show GIF delays below 20 ms slower
        images[0].save(path, save_all=True, append_images=images[1:], duration=duration_ms, loop=0)
        return path
    import av
    path, (height, width) = Path(f"{stem}.mp4"), frames[0].shape[:2]
    # faststart: the index first, so a browser plays the file before it has all of it
    with av.open(str(path), "w", format="mp4", options={"movflags": "+faststart"}) as container:
        stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1000))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": "23", "preset": "veryfast"}
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())  # the frames the encoder still holds
    return path
