"""Numpy-only drawing of the RGB frames the example envs' ``render()`` returns."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Color = tuple[int, int, int]
Point = tuple[float, float]


class Canvas:
    """A white RGB ``uint8`` image, drawn on in pixel coordinates with ``y`` pointing up.

    Args:
        width: Image width in pixels.
        height: Image height in pixels.

    Examples:
        >>> canvas = Canvas(60, 40)
        >>> canvas.circle((30, 20), 5, (0, 0, 0))
        >>> canvas.image.shape, canvas.image.dtype, int(canvas.image[20, 30, 0])
        ((40, 60, 3), dtype('uint8'), 0)
    """

    def __init__(self, width: int, height: int) -> None:
        self.image = np.full((height, width, 3), 255, dtype=np.uint8)
        rows, cols = np.mgrid[0:height, 0:width]
        #: Pixel-centre coordinates of every pixel, ``[height, width]`` each.
        self.x = cols + 0.5
        self.y = height - rows - 0.5

    def fill(self, mask: np.ndarray, color: Color) -> None:
        """Paint every pixel where ``mask`` is true."""
        self.image[mask] = color

    def polygon(self, points: Sequence[Point], color: Color) -> None:
        """Fill a convex polygon given by its corners in order."""
        corners = np.asarray(points, dtype=np.float64)
        ends = np.roll(corners, -1, axis=0)
        # side of each pixel p relative to edge a -> b: (b - a) x (p - a)
        sides = [
            (bx - ax) * (self.y - ay) - (by - ay) * (self.x - ax)
            for (ax, ay), (bx, by) in zip(corners, ends)
        ]
        sides_arr = np.stack(sides)
        self.fill((sides_arr >= 0).all(0) | (sides_arr <= 0).all(0), color)

    def circle(self, center: Point, radius: float, color: Color) -> None:
        """Fill a disc."""
        cx, cy = center
        self.fill((self.x - cx) ** 2 + (self.y - cy) ** 2 <= radius**2, color)

    def line(self, start: Point, end: Point, width: float, color: Color) -> None:
        """Draw a segment ``width`` pixels thick with round ends."""
        (ax, ay), (bx, by) = start, end
        dx, dy = bx - ax, by - ay
        # t = clip((p - a) . (b - a) / |b - a|^2, 0, 1), the nearest point a + t (b - a)
        t = ((self.x - ax) * dx + (self.y - ay) * dy) / max(dx * dx + dy * dy, 1e-12)
        t = np.clip(t, 0, 1)
        distance2 = (self.x - ax - t * dx) ** 2 + (self.y - ay - t * dy) ** 2
        self.fill(distance2 <= (width / 2) ** 2, color)
