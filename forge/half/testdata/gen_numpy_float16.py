#!/usr/bin/python3
"""Writes numpy_float16.txt: float32 bit patterns and numpy's float16 of
each (numpy.float32.astype(numpy.float16), round to nearest even), as hex,
one pair a line. Run from this directory: /usr/bin/python3 gen_numpy_float16.py"""
import numpy as np

rng = np.random.default_rng(20261130)
vals = []
# Edges: zeros, the float16 limits and their neighbours, Inf, NaN.
edges = [0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, 65519.99, 65520.0, 65536.0,
         2.0**-14, 2.0**-24, 2.0**-25, 2.0**-26, 1.5 * 2.0**-25, 2.0**-24 * 1.5,
         6.0e-8, 5.96e-8, 3.0e-8, 2.98e-8, 1e-45, 3.4e38, np.inf, -np.inf, np.nan]
vals += [np.float32(e) for e in edges]
for e in edges:
    f = np.float32(e)
    if np.isfinite(f):
        vals += [np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))]
# Midpoints between adjacent float16 values and their float32 neighbours.
h = rng.integers(0, 0x7bff, size=600, dtype=np.uint16)
a = h.view(np.float16).astype(np.float32)
b = (h + 1).view(np.float16).astype(np.float32)
mid = ((a.astype(np.float64) + b.astype(np.float64)) / 2).astype(np.float32)
sign = np.where(rng.integers(0, 2, size=mid.size) == 1, -1, 1).astype(np.float32)
mid *= sign
vals += list(mid)
vals += list(np.nextafter(mid, np.float32(np.inf)))
vals += list(np.nextafter(mid, np.float32(-np.inf)))
# Random bit patterns over all of float32, and values spread over the
# float16 range in magnitude.
vals += list(rng.integers(0, 2**32, size=1500, dtype=np.uint64).astype(np.uint32).view(np.float32))
mag = np.exp2(rng.uniform(-27, 17, size=1500)).astype(np.float32)
mag *= np.where(rng.integers(0, 2, size=mag.size) == 1, -1, 1).astype(np.float32)
vals += list(mag)

x = np.array(vals, dtype=np.float32)
with np.errstate(all="ignore"):
    y = x.astype(np.float16)
with open("numpy_float16.txt", "w") as f:
    f.write("# float32 bits, numpy %s float16 bits (gen_numpy_float16.py)\n" % np.__version__)
    for xb, yb in zip(x.view(np.uint32), y.view(np.uint16)):
        f.write("%08x %04x\n" % (xb, yb))
