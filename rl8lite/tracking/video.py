"""Rollout videos: frames encoded as an H.264 MP4 (PyAV: ``pip install 'rl8lite[video]'``), else
as an animated GIF (Pillow, which MLflow installs)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np

#: Frames wider than this many pixels are downscaled.
MAX_WIDTH = 640


def check_frame(frame: object, where: str) -> np.ndarray:
    """``frame`` as an RGB ``uint8`` array ``[H, W, 3]``, else a ``ValueError`` naming ``where``."""
    array = np.asarray(frame)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[-1] != 3:
        raise ValueError(f"{where} must return an RGB uint8 array [H, W, 3], received"
                         f" {array.dtype} of shape {list(array.shape)}")
    return array


def downscale(frame: np.ndarray, max_width: int = MAX_WIDTH) -> np.ndarray:
    """``frame`` at most ``max_width`` wide (aspect ratio kept), with even sides (H.264's
    4:2:0 needs them)."""
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
    if not frames:
        raise ValueError("no frames to encode")
    scaled = [downscale(frame) for frame in frames]
    if mp4_available():
        return _encode_mp4(scaled, Path(f"{stem}.mp4"), fps)
    return _encode_gif(scaled, Path(f"{stem}.gif"), fps)


def _encode_mp4(frames: Sequence[np.ndarray], path: Path, fps: float) -> Path:
    import av
    height, width = frames[0].shape[:2]
    # faststart: the index first, so a browser plays the file before it has all of it
    with av.open(str(path), "w", format="mp4", options={"movflags": "+faststart"}) as container:
        stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1000))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": "23", "preset": "veryfast"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def _encode_gif(frames: Sequence[np.ndarray], path: Path, fps: float) -> Path:
    from PIL import Image
    images = [Image.fromarray(frame) for frame in frames]
    duration_ms = max(20, round(1000 / fps))  # browsers show GIF delays below 20 ms slower
    images[0].save(path, save_all=True, append_images=images[1:], duration=duration_ms, loop=0)
    return path
