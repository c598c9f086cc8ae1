"""numpy reference timings for `go run ./tests/bench` (float32).

The Go tool starts this script once and talks to it over stdin/stdout, one
request per line, so that forge and numpy timings alternate and share
whatever load the machine has at that moment:

    MxNxK:OP   time C = A @ B once (≥ 20 ms of calls after a warm-up); OP is
               NN, NT, TN or TT, T meaning that operand is a transposed view
               (B = W.T of a row-major (N, K) array), as on the Go side.
               Reply: {"gflops": ...}
    copy:N     time np.copyto of N float32 elements.  Reply: {"gbps": ...}
               (bytes read + written per second, 1e9)

The first line written is {"numpy": version, "blas": library, "core": the
OpenBLAS core this process runs (openblas_get_corename, so it reflects
OPENBLAS_CORETYPE), "threads": OpenBLAS's thread count} or, when numpy
cannot be imported, {"error": "..."} (the script then exits).
Run it by hand with e.g. `echo 1024x1024x1024:NN | /usr/bin/python3
numpy_matmul.py`.
"""
import ctypes
import json
import os
import sys
import time

try:
    import numpy as np
except Exception as e:  # reported in the Go table
    print(json.dumps({"error": "numpy not importable: %s" % e}), flush=True)
    sys.exit(0)

MIN_SECONDS = 0.02


def blas_name():
    """The BLAS library numpy has loaded, from the process's memory map."""
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if ".so" in line}
        for lib in sorted(libs):
            base = lib.rsplit("/", 1)[-1]
            if "blas" in base or "mkl" in base or "blis" in base:
                return lib
    except OSError:
        pass
    try:
        return np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:
        return "?"


def openblas():
    """The OpenBLAS numpy loaded, as a ctypes handle (None if numpy runs
    another BLAS): found in the process's memory map and opened with
    RTLD_NOLOAD, so it is the very library numpy calls."""
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
            h.openblas_get_num_threads.restype = ctypes.c_int
            return h
        except (OSError, AttributeError):
            continue
    return None


def seconds_per_call(fn):
    """Warm up, then time enough calls to last MIN_SECONDS; seconds per call."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    inner = max(1, int(MIN_SECONDS / once))
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def operand(rng, rows, cols, transposed):
    """A (rows, cols) float32 matrix, stored transposed when asked."""
    if transposed:
        return rng.standard_normal((cols, rows), dtype=np.float32).T
    return rng.standard_normal((rows, cols), dtype=np.float32)


def main():
    h = openblas()
    hello = {"numpy": np.__version__, "blas": blas_name()}
    if h is not None:
        hello["core"] = h.openblas_get_corename().decode()
        hello["threads"] = h.openblas_get_num_threads()
    print(json.dumps(hello), flush=True)
    rng = np.random.default_rng(0)
    cache = {}
    for line in sys.stdin:
        req = line.strip()
        if not req:
            continue
        try:
            if req.startswith("copy:"):
                n = int(req[5:])
                if req not in cache:
                    cache[req] = (np.ones(n, np.float32), np.empty(n, np.float32))
                src, dst = cache[req]
                t = seconds_per_call(lambda: np.copyto(dst, src))
                print(json.dumps({"gbps": 2 * 4 * n / t / 1e9}), flush=True)
                continue
            if req not in cache:
                dims, op = req.split(":")
                m, n, k = (int(x) for x in dims.split("x"))
                a = operand(rng, m, k, op[0] == "T")
                b = operand(rng, k, n, op[1] == "T")
                cache[req] = (a, b, np.empty((m, n), np.float32), 2.0 * m * n * k)
            a, b, c, flops = cache[req]
            t = seconds_per_call(lambda: np.matmul(a, b, out=c))
            print(json.dumps({"gflops": flops / t / 1e9}), flush=True)
        except Exception as e:
            print(json.dumps({"error": "%s: %s" % (req, e)}), flush=True)


if __name__ == "__main__":
    main()
