"""One OpenBLAS core's sgemm rate, for tests/bench/peercore (float32).

Run once per candidate core, with OPENBLAS_CORETYPE set (or not) in the
environment before numpy loads the library. It checks a small product
against a reference computed without BLAS (some OpenBLAS builds compute
wrongly with some cores on some CPUs), then times an N×N×N sgemm: one
warm-up call, then up to REPEATS timed calls (fewer once they have taken
BUDGET seconds: a slow core needs no more to lose), and prints one JSON
line: {"core": what openblas_get_corename says in this process,
"gflops": the median rate, "calls": timed calls} or {"error": "..."}.

    OPENBLAS_CORETYPE=Haswell /usr/bin/python3 calibrate.py 2048
"""
import ctypes
import json
import os
import statistics
import sys
import time

REPEATS = 3
BUDGET = 0.6


def openblas():
    """The OpenBLAS numpy loaded (found in the process's memory map) as a
    ctypes handle, or None."""
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if ".so" in line})
    except OSError:
        return None
    for lib in libs:
        if "blas" not in lib.rsplit("/", 1)[-1]:
            continue
        try:
            h = ctypes.CDLL(lib, mode=os.RTLD_NOLOAD)
            h.openblas_get_corename.restype = ctypes.c_char_p
            return h
        except (OSError, AttributeError):
            continue
    return None


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    try:
        import numpy as np
    except Exception as e:
        print(json.dumps({"error": "numpy not importable: %s" % e}), flush=True)
        return
    h = openblas()
    core = h.openblas_get_corename().decode() if h is not None else None
    rng = np.random.default_rng(0)
    # The check: 67x45x131, odd sizes off every block edge, against an
    # elementwise float64 sum (no BLAS) within 2 gamma_k of sum |a||b|.
    a = rng.standard_normal((67, 131), dtype=np.float32)
    b = rng.standard_normal((131, 45), dtype=np.float32)
    got = (a @ b).astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = (a64[:, :, None] * b64[None, :, :]).sum(axis=1)
    mag = (np.abs(a64)[:, :, None] * np.abs(b64)[None, :, :]).sum(axis=1)
    k, u = 131, 2.0 ** -24
    if not np.all(np.abs(got - want) <= 2 * k * u / (1 - k * u) * mag):
        print(json.dumps({"core": core, "error": "wrong sgemm results"}), flush=True)
        return
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    np.matmul(a, b, out=c)
    times = []
    start = time.perf_counter()
    while len(times) < REPEATS and (not times or time.perf_counter() - start < BUDGET):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"core": core, "gflops": 2.0 * n ** 3 / statistics.median(times) / 1e9, "calls": len(times)}), flush=True)


if __name__ == "__main__":
    main()
