"""Draws client/media/icon.png (128x128): a running stitch through a chip, in NVIDIA green on slate.

No image library needed: shapes are signed-distance tests on a 4x supersampled grid, written as PNG
with zlib. Run: python client/scripts/make_icon.py
"""

import struct
import zlib
from pathlib import Path

import numpy as np

S, SS = 128, 4
N = S * SS
y, x = np.mgrid[0:N, 0:N].astype(np.float64) / SS + 0.5 / SS


def rounded_box(cx, cy, hw, hh, r):
    qx = np.abs(x - cx) - (hw - r)
    qy = np.abs(y - cy) - (hh - r)
    return np.hypot(np.maximum(qx, 0), np.maximum(qy, 0)) + np.minimum(np.maximum(qx, qy), 0) - r


def segment(ax, ay, bx, by):
    px, py, dx, dy = x - ax, y - ay, bx - ax, by - ay
    t = np.clip((px * dx + py * dy) / (dx * dx + dy * dy), 0, 1)
    return np.hypot(px - t * dx, py - t * dy)


img = np.zeros((N, N, 4))
bg = rounded_box(64, 64, 60, 60, 22) <= 0
img[bg] = (0x1f / 255, 0x29 / 255, 0x37 / 255, 1)
chip = rounded_box(64, 64, 34, 34, 6)
img[(chip <= 0) & (chip > -4)] = (0.55, 0.62, 0.70, 1)
for i in range(4):  # the chip's pins
    c = 37 + i * 18
    for d in (segment(c, 22, c, 30), segment(c, 98, c, 106), segment(22, c, 30, c), segment(98, c, 106, c)):
        img[(d <= 2.2) & bg] = (0.55, 0.62, 0.70, 1)
# A running stitch: dashes along a zigzag through the chip.
pts = [(20, 84), (44, 44), (64, 84), (84, 44), (108, 84)]
green = (0x76 / 255, 0xb9 / 255, 0, 1)
for (ax, ay), (bx, by) in zip(pts, pts[1:]):
    length = np.hypot(bx - ax, by - ay)
    n = 3
    for k in range(n):
        t0, t1 = (k + 0.12) / n, (k + 0.88) / n
        d = segment(ax + (bx - ax) * t0, ay + (by - ay) * t0, ax + (bx - ax) * t1, ay + (by - ay) * t1)
        img[(d <= 4.2) & bg] = green
small = img.reshape(S, SS, S, SS, 4).mean(axis=(1, 3))
rgba = (small * 255).round().astype(np.uint8)
raw = b"".join(b"\x00" + row.tobytes() for row in rgba)


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", S, S, 8, 6, 0, 0, 0)) \
    + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
out = Path(__file__).resolve().parents[1] / "media" / "icon.png"
out.write_bytes(png)
print(out, len(png), "bytes")
