"""PNG images without a plotting library: write an RGB array, and draw line charts.

The examples write their pictures (loss curves, renders) with this, so that the demo needs
nothing beyond torch and numpy.
"""

from __future__ import annotations

import struct
import zlib
from typing import Sequence

import numpy as np


def write_png(path: str, rgb: np.ndarray) -> None:
    """Writes an [H, W, 3] uint8 image as an 8-bit RGB PNG."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))  # filter type 0 a row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def _line(img: np.ndarray, x0: float, y0: float, x1: float, y1: float, colour) -> None:
    steps = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
    xs = np.linspace(x0, x1, steps).round().astype(int)
    ys = np.linspace(y0, y1, steps).round().astype(int)
    ok = (xs >= 0) & (xs < img.shape[1]) & (ys >= 0) & (ys < img.shape[0])
    for dy in (0, 1):  # two pixels thick
        img[np.clip(ys[ok] + dy, 0, img.shape[0] - 1), xs[ok]] = colour


COLOURS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189)]


def line_chart(path: str, series: Sequence[Sequence[float]], width: int = 640, height: int = 360,
               log_y: bool = True) -> None:
    """Each series as a polyline over its index (x from 0 to the longest length), y scaled to
    the data's range (log10 when log_y), with a frame and tick marks at the decades (log) or
    quarters (linear). Colours in order: blue, red, green, purple."""
    img = np.full((height, width, 3), 255, np.uint8)
    margin = 30
    values = [np.asarray(s, dtype=np.float64) for s in series if len(s)]
    if not values:
        write_png(path, img)
        return
    transform = (lambda v: np.log10(np.maximum(v, 1e-12))) if log_y else (lambda v: v)
    lo = min(float(transform(v).min()) for v in values)
    hi = max(float(transform(v).max()) for v in values)
    hi = hi if hi > lo else lo + 1
    n = max(len(v) for v in values)

    def to_px(i, v):
        x = margin + (width - 2 * margin) * i / max(n - 1, 1)
        y = height - margin - (height - 2 * margin) * (transform(v) - lo) / (hi - lo)
        return x, y

    grey = (120, 120, 120)
    for x0, y0, x1, y1 in ((margin, margin, margin, height - margin),
                           (margin, height - margin, width - margin, height - margin)):
        _line(img, x0, y0, x1, y1, grey)
    ticks = np.arange(np.floor(lo), np.ceil(hi) + 1) if log_y else np.linspace(lo, hi, 5)
    for t in ticks:
        if lo <= t <= hi:
            y = height - margin - (height - 2 * margin) * (t - lo) / (hi - lo)
            _line(img, margin - 6, y, margin, y, grey)
    for k, v in enumerate(values):
        pts = [to_px(i, x) for i, x in enumerate(v)]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            _line(img, x0, y0, x1, y1, COLOURS[k % len(COLOURS)])
    write_png(path, img)
