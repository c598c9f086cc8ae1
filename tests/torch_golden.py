#!/usr/bin/env python3
"""PyTorch parity fixtures for Forge's conformance suite (forge/forgetest).

Regenerate with `make golden`, which runs, from the repository root:

    /usr/bin/python3 tests/torch_golden.py

(Debian's python3-torch 1.13 and python3-numpy; a pyenv `python3` on PATH
lacks them.) The script rewrites forge/forgetest/testdata/torch/*.json, one
file per op family; commit the result. forgetest.TorchParity (torch.go)
embeds those files and replays every case through the forge API.

What a case holds
-----------------
- inputs: float32 arrays drawn by numpy with a seed derived from the case
  name (so adding a case never changes another), or int32 index arrays.
  `grad: true` marks the inputs whose gradient is checked.
- transpose_input: indices of inputs that are stored as the contiguous leaf
  X and fed to the op as X.T (torch: X.transpose(-2, -1)); permute_input
  maps an index to the permutation fed instead (X.Permute(perm...)). The
  gradient is always that of the stored leaf.
- outputs: the forward results, and upstream: one random tensor R per float
  output. The gradients are those of loss = sum_i sum(out_i * R_i).
- tol: the tolerance, |got - want| <= tol * max(1, |want|) elementwise,
  1e-5 unless the case says otherwise, with tol_reason saying why.

How the expected values are made
--------------------------------
Each case runs twice in torch: in float64 on the (float32-exact) inputs —
the reference, rounded once to float32 and stored — and in float32, whose
distance from the reference is stored as torch_f32 {fwd, grad} (same
metric). The float64 reference is what a perfect float32 implementation
would return; torch_f32 shows how far PyTorch itself is from it, i.e. that
the tolerance is one a float32 kernel can meet. Values are written as the
float64 repr of float32 numbers (exact); non-finite ones as the strings
"inf", "-inf", "nan".

Ops with no torch counterpart in 1.13 are written here from their
definitions: rms_norm, RoPE (interleaved pairs, GPT-J), attention
(softmax(q k^T scale + causal mask) v, grouped KV heads by repetition).
"""

import json
import math
import os
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "forge", "forgetest", "testdata", "torch")
DEFAULT_TOL = 1e-5

torch.set_num_threads(1)


# ---------------------------------------------------------------------------
# Case plumbing


def rng(name, salt=""):
    """A numpy generator seeded by the case name."""
    return np.random.default_rng(zlib.crc32((name + salt).encode()))


class In:
    """One op input: a float32 (grad by default) or int32 array."""

    def __init__(self, name, arr, grad=None):
        arr = np.asarray(arr)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
            self.kind = "float32"
            self.grad = True if grad is None else grad
        else:
            arr = arr.astype(np.int32)
            self.kind = "int32"
            self.grad = False
        self.name = name
        self.arr = arr


FAMILIES = {}


def case(family, name, op, inputs, fn, params=None, transpose=(), permute=None, tol=None, tol_reason=None):
    """Register a case. fn(P, *xs) computes the op in torch from the inputs
    as fed (after transpose/permute) and the params P; it returns a tensor
    or a list of tensors."""
    full = family + "/" + name
    assert all(c["name"] != full for c in FAMILIES.get(family, [])), full
    params = params or {}
    permute = {str(k): list(v) for k, v in (permute or {}).items()}
    leaves64, leaves32 = [], []
    outs = {}
    for dt, leaves in ((torch.float64, leaves64), (torch.float32, leaves32)):
        xs = []
        for i, inp in enumerate(inputs):
            if inp.kind == "float32":
                t = torch.tensor(inp.arr.astype(np.float64), dtype=dt, requires_grad=inp.grad)
            else:
                t = torch.tensor(inp.arr.astype(np.int64))
            leaves.append(t)
            v = t
            if i in transpose:
                v = v.transpose(-2, -1)
            if str(i) in permute:
                v = v.permute(*permute[str(i)])
            xs.append(v)
        res = fn(params, *xs)
        if not isinstance(res, (list, tuple)):
            res = [res]
        outs[dt] = list(res)

    # Upstream gradients: one per float output, drawn once (float32).
    ur = rng(full, "/upstream")
    upstream = []
    for o in outs[torch.float64]:
        if o.dtype.is_floating_point:
            upstream.append(ur.standard_normal(tuple(o.shape)).astype(np.float32))
        else:
            upstream.append(None)

    grads = {}
    for dt, leaves in ((torch.float64, leaves64), (torch.float32, leaves32)):
        gl = [(i, t) for i, t in enumerate(leaves) if inputs[i].kind == "float32" and inputs[i].grad]
        pairs = [(o, torch.tensor(u.astype(np.float64), dtype=dt))
                 for o, u in zip(outs[dt], upstream) if u is not None and o.requires_grad]
        if gl and pairs:
            gs = torch.autograd.grad([p[0] for p in pairs], [t for _, t in gl],
                                     grad_outputs=[p[1] for p in pairs], allow_unused=True)
            grads[dt] = {i: (g if g is not None else torch.zeros_like(t)) for (i, t), g in zip(gl, gs)}
        else:
            grads[dt] = {}

    def ref32(t):
        return t.detach().numpy().astype(np.float32) if t.dtype.is_floating_point else t.detach().numpy().astype(np.int32)

    tol = DEFAULT_TOL if tol is None else tol
    fwd_dev = max([maxdiff(ref32(a), ref32(b)) for a, b in zip(outs[torch.float32], outs[torch.float64])] + [0.0])
    grad_dev = max([maxdiff(ref32(grads[torch.float32][i]), ref32(g)) for i, g in grads[torch.float64].items()] + [0.0])
    if fwd_dev > tol or grad_dev > tol:
        # A case PyTorch's own float32 cannot pass is ill-conditioned in
        # float32: reshape it, or give it a tol with a tol_reason.
        sys.exit("torch_golden: torch float32 misses tol %.1e on %s: fwd %.2e grad %.2e"
                 % (tol, full, fwd_dev, grad_dev))

    c = {"name": full, "op": op}
    if params:
        c["params"] = params
    c["inputs"] = [{"name": inp.name, "dtype": inp.kind, "shape": list(inp.arr.shape), "grad": inp.grad,
                    "data": enc(inp.arr)} for inp in inputs]
    if transpose:
        c["transpose_input"] = sorted(transpose)
    if permute:
        c["permute_input"] = permute
    c["outputs"] = []
    for o in outs[torch.float64]:
        a = ref32(o)
        c["outputs"].append({"dtype": "float32" if o.dtype.is_floating_point else "int32",
                             "shape": list(o.shape), "data": enc(a)})
    if grads[torch.float64]:
        c["upstream"] = [None if u is None else {"shape": list(u.shape), "data": enc(u)} for u in upstream]
        c["grads"] = [None] * len(inputs)
        for i, g in grads[torch.float64].items():
            c["grads"][i] = {"shape": list(g.shape), "data": enc(ref32(g))}
    c["tol"] = tol
    if tol_reason:
        c["tol_reason"] = tol_reason
    c["torch_f32"] = {"fwd": float("%.3g" % fwd_dev), "grad": float("%.3g" % grad_dev)}
    FAMILIES.setdefault(family, []).append(c)


def maxdiff(got, want):
    """max |got-want| / max(1, |want|) over elements; non-finite values must match."""
    got = np.asarray(got, dtype=np.float64).ravel()
    want = np.asarray(want, dtype=np.float64).ravel()
    assert got.shape == want.shape
    if got.size == 0:
        return 0.0
    fin = np.isfinite(want)
    bad = ~fin & ~((got == want) | (np.isnan(got) & np.isnan(want)))
    if bad.any():
        return math.inf
    if not fin.any():
        return 0.0
    d = np.abs(got[fin] - want[fin]) / np.maximum(1.0, np.abs(want[fin]))
    return float(np.nan_to_num(d, nan=math.inf).max())


def enc(a):
    """Flatten to a JSON list: float32 values as exact float64 reprs."""
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        return [int(v) for v in a.ravel()]
    out = []
    for v in a.astype(np.float32).ravel():
        v = float(v)
        if math.isnan(v):
            out.append("nan")
        elif math.isinf(v):
            out.append("inf" if v > 0 else "-inf")
        else:
            out.append(v)
    return out


def write():
    os.makedirs(OUT_DIR, exist_ok=True)
    for f in os.listdir(OUT_DIR):
        if f.endswith(".json"):
            os.remove(os.path.join(OUT_DIR, f))
    total = 0
    for fam, cases in sorted(FAMILIES.items()):
        path = os.path.join(OUT_DIR, fam + ".json")
        with open(path, "w") as f:
            f.write('{"family": %s,\n "generator": "tests/torch_golden.py",\n "torch": %s,\n "cases": [\n'
                    % (json.dumps(fam), json.dumps(torch.__version__)))
            for i, c in enumerate(cases):
                f.write("  " + json.dumps(c, separators=(",", ":"), allow_nan=False))
                f.write(",\n" if i + 1 < len(cases) else "\n")
            f.write(" ]}\n")
        size = os.path.getsize(path)
        total += size
        print("%-28s %3d cases %8d bytes" % (os.path.relpath(path, ROOT), len(cases), size))
    print("total %d cases, %d bytes" % (sum(len(c) for c in FAMILIES.values()), total))


def f32(a):
    return np.asarray(a, dtype=np.float32)


def normal(r, shape, scale=1.0, shift=0.0):
    return f32(r.standard_normal(shape) * scale + shift)


def uniform(r, shape, lo, hi):
    return f32(r.uniform(lo, hi, shape))


def away_from_zero(r, shape, lo, hi):
    """|x| in [lo, hi) with a random sign."""
    return f32(r.uniform(lo, hi, shape) * r.choice([-1.0, 1.0], shape))


def quantized(r, shape, levels=5, step=0.5):
    """Small integer multiples of step: many exact ties."""
    return f32(r.integers(-levels, levels + 1, shape) * step)


# ---------------------------------------------------------------------------
# Creation (forward only, no inputs)


def creation():
    fam = "create"
    case(fam, "arange", "arange", [], lambda P: torch.arange(P["start"], P["stop"], P["step"], dtype=torch.float64),
         params={"start": 0, "stop": 5, "step": 0.5})
    case(fam, "arange_negative_step", "arange", [],
         lambda P: torch.arange(P["start"], P["stop"], P["step"], dtype=torch.float64),
         params={"start": 3, "stop": -2, "step": -0.7})
    case(fam, "arange_int", "arange_int", [], lambda P: torch.arange(P["n"], dtype=torch.int32), params={"n": 7})
    case(fam, "full", "full", [], lambda P: torch.full(P["shape"], P["value"], dtype=torch.float64),
         params={"shape": [2, 3], "value": 2.5})
    case(fam, "zeros", "zeros", [], lambda P: torch.zeros(P["shape"], dtype=torch.float64), params={"shape": [3, 1, 2]})
    case(fam, "ones", "ones", [], lambda P: torch.ones(P["shape"], dtype=torch.float64), params={"shape": [4]})
    case(fam, "scalar", "scalar", [], lambda P: torch.tensor(P["value"], dtype=torch.float64), params={"value": -3.25})
    r = rng("create/like")
    x = normal(r, (2, 5))
    case(fam, "zeros_like", "zeros_like", [In("x", x, grad=False)], lambda P, x: torch.zeros_like(x))
    case(fam, "ones_like", "ones_like", [In("x", x, grad=False)], lambda P, x: torch.ones_like(x))
    case(fam, "full_like", "full_like", [In("x", x, grad=False)], lambda P, x: torch.full_like(x, P["value"]),
         params={"value": 0.125})
    case(fam, "cast_int32", "cast_int32", [In("x", normal(rng("create/cast"), (3, 4), 4.0), grad=False)],
         lambda P, x: x.to(torch.int32))
    ids = rng("create/cast_f").integers(-50, 50, (2, 6))
    case(fam, "cast_float32", "cast_float32", [In("ids", ids)], lambda P, i: i.to(torch.float64))
    case(fam, "full_of_int32", "full_of_int32", [], lambda P: torch.full(P["shape"], P["value"], dtype=torch.int32),
         params={"shape": [2, 3], "value": 7})
    case(fam, "zeros_of_int32", "zeros_of_int32", [], lambda P: torch.zeros(P["shape"], dtype=torch.int32),
         params={"shape": [5]})
    # CopyFrom: an in-place write (no gradient) of a broadcast source, into a
    # transposed view, and with conversion to int32 (truncation).
    r = rng("create/copy_from")
    case(fam, "copy_from_bcast_into_t", "copy_from",
         [In("dst", normal(r, (4, 3)), grad=False), In("src", normal(r, (4,)), grad=False)],
         lambda P, d, s: d.clone().copy_(s), transpose=[0])
    r = rng("create/copy_from_int")
    case(fam, "copy_from_float_to_int32", "copy_from",
         [In("dst", r.integers(-9, 9, (2, 5))), In("src", normal(r, (2, 5), 4.0), grad=False)],
         lambda P, d, s: d.to(torch.int32).clone().copy_(s))


# ---------------------------------------------------------------------------
# Unary ops


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


UNARY = [
    # name, op, torch fn, input generator, params
    ("neg", "neg", lambda P, x: -x, lambda r, s: normal(r, s), {}),
    ("exp", "exp", lambda P, x: torch.exp(x), lambda r, s: uniform(r, s, -5, 10), {}),
    ("log", "log", lambda P, x: torch.log(x), lambda r, s: uniform(r, s, 0.05, 5), {}),
    ("sqrt", "sqrt", lambda P, x: torch.sqrt(x), lambda r, s: uniform(r, s, 0.05, 5), {}),
    ("rsqrt", "rsqrt", lambda P, x: torch.rsqrt(x), lambda r, s: uniform(r, s, 0.05, 5), {}),
    ("tanh", "tanh", lambda P, x: torch.tanh(x), lambda r, s: normal(r, s, 2.0), {}),
    ("sigmoid", "sigmoid", lambda P, x: torch.sigmoid(x), lambda r, s: normal(r, s, 4.0), {}),
    ("silu", "silu", lambda P, x: F.silu(x), lambda r, s: normal(r, s, 4.0), {}),
    ("softplus", "softplus", lambda P, x: F.softplus(x), lambda r, s: normal(r, s, 6.0), {}),
    ("gelu_tanh", "gelu", lambda P, x: gelu_tanh(x), lambda r, s: normal(r, s, 2.5), {}),
    ("gelu_exact", "gelu_exact", lambda P, x: F.gelu(x), lambda r, s: normal(r, s, 2.5), {}),
    ("relu", "relu", lambda P, x: F.relu(x), lambda r, s: quantized(r, s, 4, 0.25) + normal(r, s, 0.01) * (r.random(s) < 0.5), {}),
    ("abs", "abs", lambda P, x: torch.abs(x), lambda r, s: quantized(r, s, 4, 0.25) + normal(r, s, 0.01) * (r.random(s) < 0.5), {}),
    ("square", "square", lambda P, x: torch.square(x), lambda r, s: normal(r, s, 2.0), {}),
    ("sign", "sign", lambda P, x: torch.sign(x), lambda r, s: quantized(r, s, 3, 0.5), {}),
    # Halves (ties go to even) and values off them.
    ("round", "round", lambda P, x: torch.round(x), lambda r, s: quantized(r, s, 6, 0.5) + normal(r, s, 0.2) * (r.random(s) < 0.5), {}),
    ("pow_scalar_3", "pow_scalar", lambda P, x: torch.pow(x, P["p"]), lambda r, s: normal(r, s), {"p": 3.0}),
    ("pow_scalar_2", "pow_scalar", lambda P, x: torch.pow(x, P["p"]), lambda r, s: normal(r, s), {"p": 2.0}),
    ("pow_scalar_half", "pow_scalar", lambda P, x: torch.pow(x, P["p"]), lambda r, s: uniform(r, s, 0.1, 4), {"p": 0.5}),
    ("pow_scalar_neg1.5", "pow_scalar", lambda P, x: torch.pow(x, P["p"]), lambda r, s: uniform(r, s, 0.2, 4), {"p": -1.5}),
    ("clamp", "clamp", lambda P, x: torch.clamp(x, P["lo"], P["hi"]), lambda r, s: quantized(r, s, 4, 0.25) + normal(r, s, 0.1) * (r.random(s) < 0.5), {"lo": -0.5, "hi": 0.75}),
    ("add_scalar", "add_scalar", lambda P, x: x + P["s"], lambda r, s: normal(r, s), {"s": 1.5}),
    ("sub_scalar", "sub_scalar", lambda P, x: x - P["s"], lambda r, s: normal(r, s), {"s": 0.3}),
    ("mul_scalar", "mul_scalar", lambda P, x: x * P["s"], lambda r, s: normal(r, s), {"s": -2.5}),
    ("div_scalar", "div_scalar", lambda P, x: x / P["s"], lambda r, s: normal(r, s), {"s": 3.0}),
    ("rsub_scalar", "rsub_scalar", lambda P, x: P["s"] - x, lambda r, s: normal(r, s), {"s": 2.0}),
    ("rdiv_scalar", "rdiv_scalar", lambda P, x: P["s"] / x, lambda r, s: away_from_zero(r, s, 0.3, 3), {"s": 1.5}),
    ("rpow_scalar", "rpow_scalar", lambda P, x: torch.pow(P["s"], x), lambda r, s: uniform(r, s, -3, 3), {"s": 2.5}),
    ("rpow_scalar_half", "rpow_scalar", lambda P, x: torch.pow(P["s"], x), lambda r, s: uniform(r, s, -3, 3), {"s": 0.5}),
]


def unary():
    fam = "unary"
    for name, op, fn, gen, params in UNARY:
        r = rng(fam + "/" + name)
        x = gen(r, (5, 7))
        if name in ("sigmoid", "silu", "softplus", "gelu_tanh", "gelu_exact", "tanh", "exp"):
            # Saturated and central points.
            extremes = {"exp": [-80.0, -20.0, 0.0, 15.0, 20.0], "tanh": [-12.0, 12.0, 0.0, 1e-3, -25.0]}.get(
                name, [-30.0, 30.0, 0.0, -12.0, 12.0])
            x.ravel()[: len(extremes)] = extremes
        # Sign and round have no gradient in forge (torch's is zero everywhere).
        case(fam, name, op, [In("x", x, grad=name not in ("sign", "round"))], fn, params=params)
    # Non-contiguous inputs, odd sizes, 0-d and 1-D.
    r = rng("unary/tanh_t_33x17")
    case(fam, "tanh_t_33x17", "tanh", [In("x", normal(r, (17, 33), 2.0))], lambda P, x: torch.tanh(x), transpose=[0])
    r = rng("unary/gelu_t_9x5")
    case(fam, "gelu_t_9x5", "gelu", [In("x", normal(r, (5, 9), 2.0))], lambda P, x: gelu_tanh(x), transpose=[0])
    r = rng("unary/exp_permuted")
    case(fam, "exp_permuted", "exp", [In("x", normal(r, (3, 4, 5)))], lambda P, x: torch.exp(x), permute={0: [2, 0, 1]})
    r = rng("unary/silu_1d_257")
    case(fam, "silu_1d_257", "silu", [In("x", normal(r, (257,), 3.0))], lambda P, x: F.silu(x))
    r = rng("unary/sigmoid_0d")
    case(fam, "sigmoid_0d", "sigmoid", [In("x", normal(r, ()))], lambda P, x: torch.sigmoid(x))
    r = rng("unary/clamp_t")
    case(fam, "clamp_t", "clamp", [In("x", normal(r, (6, 4)))], lambda P, x: torch.clamp(x, P["lo"], P["hi"]),
         params={"lo": -1.0, "hi": 0.25}, transpose=[0])


# ---------------------------------------------------------------------------
# Binary ops with broadcasting


def binary():
    fam = "binary"
    ops = {
        "add": lambda P, a, b: a + b,
        "sub": lambda P, a, b: a - b,
        "mul": lambda P, a, b: a * b,
        "div": lambda P, a, b: a / b,
        "pow": lambda P, a, b: torch.pow(a, b),
        "maximum": lambda P, a, b: torch.maximum(a, b),
        "minimum": lambda P, a, b: torch.minimum(a, b),
    }

    def gen(op, r, sa, sb):
        if op == "div":
            return normal(r, sa), away_from_zero(r, sb, 0.5, 2.0)
        if op == "pow":
            return uniform(r, sa, 0.5, 2.0), normal(r, sb)
        if op in ("maximum", "minimum"):
            return quantized(r, sa, 3, 0.5), quantized(r, sb, 3, 0.5)
        return normal(r, sa), normal(r, sb)

    shapes = [
        ("same_5x6", (5, 6), (5, 6)),
        ("bcast_3x4_4", (3, 4), (4,)),
        ("bcast_2x1x5_3x1", (2, 1, 5), (3, 1)),
        ("bcast_scalar_rhs", (3, 4), ()),
        ("bcast_scalar_lhs", (), (2, 3)),
        ("bcast_5x1_1x4", (5, 1), (1, 4)),
        ("bcast_4_3x4", (4,), (3, 4)),
    ]
    for op, fn in ops.items():
        for sname, sa, sb in shapes:
            r = rng(fam + "/" + op + "_" + sname)
            a, b = gen(op, r, sa, sb)
            case(fam, op + "_" + sname, op, [In("a", a), In("b", b)], fn)
    # Non-contiguous operands.
    r = rng("binary/add_t_both_7x9")
    case(fam, "add_t_both_7x9", "add", [In("a", normal(r, (9, 7))), In("b", normal(r, (9, 7)))], ops["add"],
         transpose=[0, 1])
    r = rng("binary/mul_t_bcast")
    case(fam, "mul_t_bcast", "mul", [In("a", normal(r, (4, 6))), In("b", normal(r, (4,)))], ops["mul"], transpose=[0])
    r = rng("binary/div_t_rhs")
    case(fam, "div_t_rhs", "div", [In("a", normal(r, (5, 3))), In("b", away_from_zero(r, (3, 5), 0.5, 2))],
         ops["div"], transpose=[1])
    r = rng("binary/sub_permuted")
    case(fam, "sub_permuted", "sub", [In("a", normal(r, (4, 2, 3))), In("b", normal(r, (2, 3, 4)))], ops["sub"],
         permute={0: [1, 2, 0]})
    r = rng("binary/add_large_17x65")
    case(fam, "add_large_17x65", "add", [In("a", normal(r, (17, 65))), In("b", normal(r, (65,)))], ops["add"])
    r = rng("binary/maximum_ties_bcast")
    case(fam, "maximum_ties_bcast", "maximum", [In("a", quantized(r, (2, 1, 4), 1, 1.0)), In("b", quantized(r, (3, 1), 1, 1.0))],
         ops["maximum"])
    # Same tensor on both sides: gradients from both operands accumulate.
    r = rng("binary/mul_self")
    case(fam, "mul_self", "mul_self", [In("a", normal(r, (3, 5)))], lambda P, a: a * a)

    # Comparisons: forward only, 1/0 in float32.
    cmps = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}
    for op, fn in cmps.items():
        r = rng("binary/" + op)
        a, b = quantized(r, (4, 5), 2, 0.5), quantized(r, (5,), 2, 0.5)
        case(fam, op + "_bcast", op, [In("a", a, grad=False), In("b", b, grad=False)],
             lambda P, a, b, fn=fn: fn(a, b).to(a.dtype))

    # Where and MaskedFill.
    r = rng("binary/where_bcast")
    cond = f32(r.random((3, 1)) < 0.5)
    cond[0, 0], cond[1, 0] = 1, 0
    case(fam, "where_bcast", "where",
         [In("cond", cond, grad=False), In("a", normal(r, (3, 4))), In("b", normal(r, (4,)))],
         lambda P, c, a, b: torch.where(c != 0, a, b))
    r = rng("binary/where_int_cond_scalar")
    cond = r.integers(0, 2, (2, 3, 4)) * r.integers(1, 4, (2, 3, 4))
    case(fam, "where_int_cond_scalar", "where",
         [In("cond", cond), In("a", normal(r, (2, 3, 4))), In("b", normal(r, ()))],
         lambda P, c, a, b: torch.where(c != 0, a, b))
    r = rng("binary/where_t")
    cond = f32(r.random((5, 3)) < 0.5)
    case(fam, "where_t", "where",
         [In("cond", cond, grad=False), In("a", normal(r, (3, 5))), In("b", normal(r, (5, 3)))],
         lambda P, c, a, b: torch.where(c != 0, a, b), transpose=[1])
    T = 5
    causal = f32(np.triu(np.ones((T, T)), 1))
    r = rng("binary/masked_fill_causal")
    case(fam, "masked_fill_causal", "masked_fill", [In("x", normal(r, (2, T, T))), In("mask", causal, grad=False)],
         lambda P, x, m: x.masked_fill(m != 0, P["value"]), params={"value": -1e9})
    r = rng("binary/masked_fill_neg_inf")
    case(fam, "masked_fill_neg_inf", "masked_fill",
         [In("x", normal(r, (3, T, T))), In("mask", np.triu(np.ones((T, T), dtype=np.int32), 1))],
         lambda P, x, m: x.masked_fill(m != 0, -math.inf), params={"value": "-inf"})
    r = rng("binary/masked_fill_rows")
    m = f32(r.random((4, 1)) < 0.5)
    m[0, 0], m[1, 0] = 1, 0
    case(fam, "masked_fill_rows", "masked_fill", [In("x", normal(r, (4, 6))), In("mask", m, grad=False)],
         lambda P, x, m: x.masked_fill(m != 0, P["value"]), params={"value": 0.5})


# ---------------------------------------------------------------------------
# Reductions


def var(x, dims, correction, keep):
    if dims is None:
        dims = list(range(x.dim()))
    n = 1
    for d in dims:
        n *= x.shape[d]
    m = x.mean(dim=dims, keepdim=True)
    return ((x - m) ** 2).sum(dim=dims, keepdim=keep) / (n - correction)


def reduce():
    fam = "reduce"
    shape = (4, 5, 6)
    axes_list = [
        ("all", None),
        ("axis1", [1]),
        ("axis_neg1", [-1]),
        ("axes02", [0, 2]),
    ]

    def dims(ax, nd):
        return None if ax is None else [a % nd for a in ax]

    for keep in (False, True):
        k = "_keep" if keep else ""
        for aname, ax in axes_list:
            if keep and ax is None:
                continue
            P = {"keep": keep}
            if ax is not None:
                P["axes"] = ax
            r = rng(fam + "/sum_" + aname + k)
            case(fam, "sum_" + aname + k, "sum", [In("x", normal(r, shape))],
                 lambda P, x: x.sum(dim=dims(P.get("axes"), 3), keepdim=P["keep"]) if "axes" in P else x.sum(),
                 params=P)
            r = rng(fam + "/mean_" + aname + k)
            case(fam, "mean_" + aname + k, "mean", [In("x", normal(r, shape))],
                 lambda P, x: x.mean(dim=dims(P.get("axes"), 3), keepdim=P["keep"]) if "axes" in P else x.mean(),
                 params=P)
            r = rng(fam + "/var_" + aname + k)
            case(fam, "var_" + aname + k, "var", [In("x", normal(r, shape))],
                 lambda P, x: var(x, dims(P.get("axes"), 3), 1, P["keep"]), params=P)
            for op, tfn in (("max", torch.amax), ("min", torch.amin)):
                r = rng(fam + "/" + op + "_ties_" + aname + k)
                x = quantized(r, shape, 2, 0.5)  # many ties: the gradient is split evenly
                case(fam, op + "_ties_" + aname + k, op, [In("x", x)],
                     lambda P, x, tfn=tfn: tfn(x, dim=dims(P.get("axes"), 3) if "axes" in P else list(range(x.dim())),
                                               keepdim=P["keep"]),
                     params=P)
    r = rng("reduce/var_correction0")
    case(fam, "var_correction0_axis_neg1", "var", [In("x", normal(r, shape))],
         lambda P, x: var(x, [2], 0, False), params={"axes": [-1], "correction": 0, "keep": False})
    r = rng("reduce/var_offset")
    case(fam, "var_offset_mean", "var", [In("x", normal(r, (6, 40), 1.0, 8.0))],
         lambda P, x: var(x, [1], 1, False), params={"axes": [1], "keep": False})
    r = rng("reduce/max_distinct")
    case(fam, "max_distinct_axis0", "max", [In("x", normal(r, (7, 9)))], lambda P, x: torch.amax(x, dim=0),
         params={"axes": [0], "keep": False})
    r = rng("reduce/sum_t")
    case(fam, "sum_t_axis0", "sum", [In("x", normal(r, (5, 8)))], lambda P, x: x.sum(dim=0),
         params={"axes": [0], "keep": False}, transpose=[0])
    r = rng("reduce/mean_permuted")
    case(fam, "mean_permuted_axes12", "mean", [In("x", normal(r, (3, 4, 5)))], lambda P, x: x.mean(dim=[1, 2]),
         params={"axes": [1, 2], "keep": False}, permute={0: [2, 0, 1]})
    r = rng("reduce/max_t")
    case(fam, "max_t_axis1_keep", "max", [In("x", quantized(r, (6, 5), 2, 0.5))],
         lambda P, x: torch.amax(x, dim=1, keepdim=True), params={"axes": [1], "keep": True}, transpose=[0])
    # Long reductions: 4000 terms. Values in [0, 1) so the sum (≈2000) does
    # not cancel and the relative metric is meaningful.
    r = rng("reduce/sum_long_4000")
    # No per-case tolerance is needed: even one float32 running total over
    # these 4000 terms errs by ~1.5e-6 relative (measured with numpy), and
    # pairwise or blocked sums land near 1e-7.
    case(fam, "sum_long_4000", "sum", [In("x", uniform(r, (4000,), 0, 1))], lambda P, x: x.sum(), params={"keep": False})
    r = rng("reduce/mean_long_rows")
    case(fam, "mean_long_2x700", "mean", [In("x", normal(r, (2, 700)))], lambda P, x: x.mean(dim=1),
         params={"axes": [1], "keep": False})
    r = rng("reduce/var_long")
    case(fam, "var_long_1x1500", "var", [In("x", normal(r, (1, 1500)))], lambda P, x: var(x, [1], 1, False),
         params={"axes": [1], "keep": False})
    # 0-d and 1-D.
    r = rng("reduce/sum_1d")
    case(fam, "sum_1d", "sum", [In("x", normal(r, (7,)))], lambda P, x: x.sum(), params={"keep": False})
    # argmax / argmin: first index among ties.
    for op, tfn in (("argmax", torch.argmax), ("argmin", torch.argmin)):
        for axis in (0, 1, -1):
            r = rng("reduce/" + op + str(axis))
            x = quantized(r, shape, 2, 0.5)
            case(fam, "%s_ties_axis%d" % (op, axis), op, [In("x", x, grad=False)],
                 lambda P, x, tfn=tfn: tfn(x, dim=P["axis"]).to(torch.int32), params={"axis": axis})
        r = rng("reduce/" + op + "_t")
        case(fam, op + "_t_axis1", op, [In("x", normal(r, (7, 5)), grad=False)],
             lambda P, x, tfn=tfn: tfn(x, dim=1).to(torch.int32), params={"axis": 1}, transpose=[0])


# ---------------------------------------------------------------------------
# Matmul


def matmul():
    fam = "matmul"
    mm = lambda P, a, b: torch.matmul(a, b)

    def mk(name, sa, sb, transpose=(), permute=None, tol=None, tol_reason=None, scale=1.0):
        r = rng(fam + "/" + name)
        case(fam, name, "matmul", [In("a", normal(r, sa, scale)), In("b", normal(r, sb, scale))], mm,
             transpose=transpose, permute=permute, tol=tol, tol_reason=tol_reason)

    mk("2d_odd_7x13x5", (7, 13), (13, 5))
    mk("2d_row_1x9x1", (1, 9), (9, 1))
    mk("2d_outer_k1", (6, 1), (1, 4))
    mk("2d_31x37x29", (31, 37), (37, 29))
    mk("2d_long_k400", (3, 400), (400, 2))
    mk("batched", (3, 5, 6), (3, 6, 4))
    mk("batched_bcast", (2, 1, 4, 5), (3, 5, 6))
    mk("batched_bcast_one", (1, 4, 5), (3, 5, 2))
    mk("batched_2d_fold", (2, 5, 7), (7, 3))
    mk("2d_batched", (4, 5), (2, 5, 3))
    mk("t_a", (13, 7), (13, 5), transpose=[0])
    mk("t_b", (7, 13), (5, 13), transpose=[1])
    mk("t_ab", (13, 7), (5, 13), transpose=[0, 1])
    mk("batched_t_a", (3, 6, 5), (3, 6, 4), transpose=[0])
    mk("batched_t_b_2d", (2, 4, 5), (6, 5), transpose=[1])
    mk("batched_t_ab_bcast", (2, 1, 6, 5), (3, 4, 6), transpose=[0, 1])
    mk("permuted_rows", (5, 3, 6), (3, 6, 4), permute={0: [1, 0, 2]})
    mk("permuted_batch_last", (6, 4, 3), (3, 6, 5), permute={0: [2, 1, 0]})
    mk("4d_attention_like", (2, 3, 7, 8), (2, 3, 7, 8), transpose=[1])


# ---------------------------------------------------------------------------
# Movement and indexing


def movement():
    fam = "movement"

    def one(name, op, shape, fn, params=None, transpose=(), permute=None, gen=None):
        r = rng(fam + "/" + name)
        x = gen(r) if gen else normal(r, shape)
        case(fam, name, op, [In("x", x)], fn, params=params, transpose=transpose, permute=permute)

    one("reshape", "reshape", (3, 4, 5), lambda P, x: x.reshape(P["shape"]), {"shape": [5, -1]})
    one("reshape_t", "reshape", (4, 6), lambda P, x: x.reshape(P["shape"]), {"shape": [3, 8]}, transpose=[0])
    one("reshape_to_0d", "reshape", (1, 1), lambda P, x: x.reshape(P["shape"]), {"shape": []})
    one("view", "view", (2, 6), lambda P, x: x.view(P["shape"]), {"shape": [3, 2, 2]})
    one("flatten_1_2", "flatten", (2, 3, 4, 5), lambda P, x: torch.flatten(x, P["start"], P["end"]), {"start": 1, "end": 2})
    one("flatten_t", "flatten", (3, 4), lambda P, x: torch.flatten(x, P["start"], P["end"]), {"start": 0, "end": -1},
        transpose=[0])
    one("unsqueeze_neg1", "unsqueeze", (3, 4), lambda P, x: x.unsqueeze(P["axis"]), {"axis": -1})
    one("unsqueeze_0", "unsqueeze", (3, 4), lambda P, x: x.unsqueeze(P["axis"]), {"axis": 0})
    one("squeeze_all", "squeeze", (1, 3, 1, 4), lambda P, x: x.squeeze(), {"axes": []})
    one("squeeze_axis", "squeeze", (1, 3, 1, 4), lambda P, x: x.squeeze(2), {"axes": [2]})
    one("permute", "permute", (2, 3, 4), lambda P, x: x.permute(*P["perm"]), {"perm": [2, 0, 1]})
    one("permute_neg", "permute", (2, 3, 4), lambda P, x: x.permute(1, 2, 0), {"perm": [1, -1, 0]})
    one("transpose_0_2", "transpose", (2, 3, 4), lambda P, x: x.transpose(P["a"], P["b"]), {"a": 0, "b": 2})
    one("t", "t", (3, 5), lambda P, x: x.transpose(-2, -1))
    one("t_3d", "t", (2, 3, 5), lambda P, x: x.transpose(-2, -1))
    one("expand", "expand", (3, 1), lambda P, x: x.expand(2, 3, 4), {"shape": [2, 3, 4]})
    one("expand_keep", "expand", (1, 4), lambda P, x: x.expand(3, 4), {"shape": [3, -1]})
    one("expand_t", "expand", (1, 5), lambda P, x: x.expand(2, 5, 3), {"shape": [2, -1, 3]}, transpose=[0])
    one("narrow", "narrow", (5, 7), lambda P, x: x.narrow(1, 2, 3), {"axis": 1, "start": 2, "length": 3})
    one("narrow_neg_start", "narrow", (5, 7), lambda P, x: x.narrow(0, 5 - 2, 2), {"axis": 0, "start": -2, "length": 2})
    one("narrow_t", "narrow", (5, 7), lambda P, x: x.narrow(0, 1, 4), {"axis": 0, "start": 1, "length": 4},
        transpose=[0])
    one("slice_clip", "slice", (6, 4), lambda P, x: x[-3:100], {"axis": 0, "start": -3, "end": 100})
    one("slice_axis1", "slice", (3, 8), lambda P, x: x[:, 1:-2], {"axis": 1, "start": 1, "end": -2})
    one("slice_empty", "slice", (3, 8), lambda P, x: x[:, 5:2], {"axis": 1, "start": 5, "end": 2})
    one("index_neg", "index", (4, 5, 6), lambda P, x: x.select(1, -1), {"axis": 1, "i": -1})
    one("index_0", "index", (4, 5), lambda P, x: x.select(0, 2), {"axis": 0, "i": 2})
    one("contiguous_t", "contiguous", (4, 7), lambda P, x: x.contiguous(), transpose=[0])
    one("clone", "clone", (3, 4), lambda P, x: x.clone())
    one("clone_permuted", "clone", (2, 3, 4), lambda P, x: x.clone(), permute={0: [1, 2, 0]})

    # Multi-input: concat and stack.
    r = rng("movement/concat0")
    case(fam, "concat_axis0", "concat", [In("a", normal(r, (2, 3))), In("b", normal(r, (4, 3))), In("c", normal(r, (1, 3)))],
         lambda P, *xs: torch.cat(xs, dim=P["axis"]), params={"axis": 0})
    r = rng("movement/concat1_t")
    case(fam, "concat_axis1_t", "concat", [In("a", normal(r, (2, 3))), In("b", normal(r, (3, 5)))],
         lambda P, *xs: torch.cat(xs, dim=P["axis"]), params={"axis": 1}, transpose=[0])
    r = rng("movement/concat_neg")
    case(fam, "concat_axis_neg1_3d", "concat", [In("a", normal(r, (2, 3, 4))), In("b", normal(r, (2, 3, 1)))],
         lambda P, *xs: torch.cat(xs, dim=P["axis"]), params={"axis": -1})
    r = rng("movement/concat_same")
    case(fam, "concat_same_tensor", "concat_self", [In("a", normal(r, (2, 3)))],
         lambda P, a: torch.cat([a, a, a], dim=0), params={"axis": 0, "n": 3})
    r = rng("movement/stack0")
    case(fam, "stack_axis0", "stack", [In("a", normal(r, (3, 4))), In("b", normal(r, (3, 4))), In("c", normal(r, (3, 4)))],
         lambda P, *xs: torch.stack(xs, dim=P["axis"]), params={"axis": 0})
    r = rng("movement/stack_neg")
    case(fam, "stack_axis_neg1", "stack", [In("a", normal(r, (3, 4))), In("b", normal(r, (4, 3)))],
         lambda P, *xs: torch.stack(xs, dim=P["axis"]), params={"axis": -1}, transpose=[1])

    # Multi-output: split and chunk.
    r = rng("movement/split")
    case(fam, "split_axis0", "split", [In("x", normal(r, (7, 4)))],
         lambda P, x: list(torch.split(x, P["sizes"], dim=P["axis"])), params={"axis": 0, "sizes": [2, 4, 1]})
    r = rng("movement/split_t")
    case(fam, "split_axis1_t", "split", [In("x", normal(r, (6, 3)))],
         lambda P, x: list(torch.split(x, P["sizes"], dim=P["axis"])), params={"axis": 1, "sizes": [1, 5]},
         transpose=[0])
    r = rng("movement/chunk")
    case(fam, "chunk_uneven", "chunk", [In("x", normal(r, (7, 5)))],
         lambda P, x: list(torch.chunk(x, P["n"], dim=P["axis"])), params={"n": 3, "axis": 0})
    r = rng("movement/chunk1")
    case(fam, "chunk_axis1", "chunk", [In("x", normal(r, (2, 5, 3)))],
         lambda P, x: list(torch.chunk(x, P["n"], dim=P["axis"])), params={"n": 2, "axis": 1})

    # Indexing with repeated indices (the gradient accumulates).
    r = rng("movement/index_select0")
    case(fam, "index_select_axis0", "index_select",
         [In("x", normal(r, (5, 4))), In("idx", np.array([4, 0, 4, 2, 4]))],
         lambda P, x, i: torch.index_select(x, P["axis"], i), params={"axis": 0})
    r = rng("movement/index_select1")
    case(fam, "index_select_axis1_3d", "index_select",
         [In("x", normal(r, (2, 6, 3))), In("idx", np.array([5, 1, 1, 0]))],
         lambda P, x, i: torch.index_select(x, P["axis"], i), params={"axis": 1})
    r = rng("movement/index_select_t")
    case(fam, "index_select_t", "index_select",
         [In("x", normal(r, (3, 6))), In("idx", np.array([2, 2, 5]))],
         lambda P, x, i: torch.index_select(x, P["axis"], i), params={"axis": 0}, transpose=[0])
    r = rng("movement/gather1")
    case(fam, "gather_axis1", "gather",
         [In("x", normal(r, (4, 6))), In("idx", r.integers(0, 6, (4, 3)))],
         lambda P, x, i: torch.gather(x, P["axis"], i), params={"axis": 1})
    r = rng("movement/gather0")
    case(fam, "gather_axis0_repeated", "gather",
         [In("x", normal(r, (5, 3))), In("idx", np.array([[0, 4, 4], [4, 4, 1]]))],
         lambda P, x, i: torch.gather(x, P["axis"], i), params={"axis": 0})
    r = rng("movement/gather_3d")
    case(fam, "gather_3d_axis_neg1", "gather",
         [In("x", normal(r, (2, 3, 7))), In("idx", r.integers(0, 7, (2, 3, 5)))],
         lambda P, x, i: torch.gather(x, P["axis"], i), params={"axis": -1})
    # index_add: repeated indices accumulate; rows 1 and 3 receive nothing.
    r = rng("movement/index_add0")
    case(fam, "index_add_axis0", "index_add",
         [In("x", normal(r, (5, 3))), In("idx", np.array([4, 0, 4, 2, 4, 0])), In("src", normal(r, (6, 3)))],
         lambda P, x, i, s: torch.index_add(x, P["axis"], i, s), params={"axis": 0})
    r = rng("movement/index_add1")
    case(fam, "index_add_axis1_3d", "index_add",
         [In("x", normal(r, (2, 4, 3))), In("idx", np.array([3, 3, 0])), In("src", normal(r, (2, 3, 3)))],
         lambda P, x, i, s: torch.index_add(x, P["axis"], i, s), params={"axis": 1})


# ---------------------------------------------------------------------------
# Softmax


def softmax():
    fam = "softmax"
    for op, tfn in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
        def mk(name, x, axis, transpose=(), permute=None):
            case(fam, op + "_" + name, op, [In("x", x)], lambda P, x, tfn=tfn: tfn(x, dim=P["axis"]),
                 params={"axis": axis}, transpose=transpose, permute=permute)

        r = rng(fam + "/" + op + "/last")
        mk("last_5x7", normal(r, (5, 7), 2.0), -1)
        r = rng(fam + "/" + op + "/middle")
        mk("middle_3x5x4", normal(r, (3, 5, 4), 2.0), 1)
        r = rng(fam + "/" + op + "/axis0")
        mk("axis0_6x3", normal(r, (6, 3), 2.0), 0)
        r = rng(fam + "/" + op + "/odd")
        mk("odd_13x33", normal(r, (13, 33), 3.0), -1)
        r = rng(fam + "/" + op + "/large")
        x = normal(r, (4, 9), 5.0)
        x[0] += 1000.0
        x[1] -= 1000.0
        x[2, 3] = 80.0
        mk("large_values", x, -1)
        r = rng(fam + "/" + op + "/masked")
        x = normal(r, (6, 8), 2.0)
        x[np.triu(np.ones((6, 8), dtype=bool), 3)] = -np.inf  # masked positions, every row keeps ≥ 3
        mk("masked_neg_inf", x, -1)
        r = rng(fam + "/" + op + "/t")
        mk("t_last", normal(r, (9, 4), 2.0), -1, transpose=[0])
        r = rng(fam + "/" + op + "/permuted")
        mk("permuted_middle", normal(r, (4, 2, 5), 2.0), 1, permute={0: [1, 2, 0]})
        r = rng(fam + "/" + op + "/long")
        mk("long_row_1000", normal(r, (1, 1000), 3.0), -1)


# ---------------------------------------------------------------------------
# Norms


def rms_norm_ref(x, w, eps):
    y = x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps)
    return y * w if w is not None else y


def norms():
    fam = "norm"

    def ln(name, shape, affine, eps=1e-5, shift=0.0, scale=1.0, transpose=(), permute=None):
        r = rng(fam + "/layer_norm_" + name)
        c = shape[-1] if not transpose else shape[-2]
        ins = [In("x", normal(r, shape, scale, shift))]
        if affine in ("wb", "w"):
            ins.append(In("w", normal(r, (c,), 0.5, 1.0)))
        if affine == "wb":
            ins.append(In("b", normal(r, (c,), 0.5)))

        def fn(P, x, w=None, b=None):
            return F.layer_norm(x, (x.shape[-1],), weight=w, bias=b, eps=P["eps"])

        case(fam, "layer_norm_" + name, "layer_norm", ins, fn, params={"eps": eps, "affine": affine},
             transpose=transpose, permute=permute)

    ln("affine_6x10", (6, 10), "wb")
    ln("no_affine_4x3x8", (4, 3, 8), "none")
    ln("weight_only_5x6", (5, 6), "w")
    ln("odd_7x33", (7, 33), "wb")
    ln("eps_1e-3", (3, 16), "wb", eps=1e-3, scale=0.05)
    ln("offset_mean", (4, 24), "wb", shift=20.0)
    ln("t_input", (12, 5), "wb", transpose=[0])
    ln("wide_1x512", (1, 512), "wb")

    def rms(name, shape, weight, eps=1e-6, scale=1.0, transpose=(), permute=None):
        r = rng(fam + "/rms_norm_" + name)
        c = shape[-1] if not transpose else shape[-2]
        ins = [In("x", normal(r, shape, scale))]
        if weight:
            ins.append(In("w", normal(r, (c,), 0.5, 1.0)))
        case(fam, "rms_norm_" + name, "rms_norm", ins,
             lambda P, x, w=None: rms_norm_ref(x, w, P["eps"]), params={"eps": eps, "affine": "w" if weight else "none"},
             transpose=transpose, permute=permute)

    rms("weight_6x10", (6, 10), True)
    rms("no_weight_4x3x8", (4, 3, 8), False)
    rms("odd_7x33", (7, 33), True)
    rms("eps_1e-2_small", (3, 16), True, eps=1e-2, scale=0.05)
    rms("t_input", (12, 5), True, transpose=[0])
    rms("permuted", (5, 2, 6), True, permute={0: [1, 0, 2]})
    rms("wide_1x512", (1, 512), True, eps=1e-5)


# ---------------------------------------------------------------------------
# Embedding


def embedding():
    fam = "embedding"
    r = rng("embedding/2d_ids")
    case(fam, "ids_2x5_repeated", "embedding",
         [In("ids", np.array([[3, 1, 3, 10, 0], [3, 7, 7, 1, 3]])), In("table", normal(r, (11, 8)))],
         lambda P, i, t: F.embedding(i, t))
    r = rng("embedding/1d_ids")
    case(fam, "ids_1d", "embedding", [In("ids", r.integers(0, 50, (7,))), In("table", normal(r, (50, 16)))],
         lambda P, i, t: F.embedding(i, t))
    r = rng("embedding/3d_ids")
    case(fam, "ids_2x3x4_odd_c", "embedding", [In("ids", r.integers(0, 9, (2, 3, 4))), In("table", normal(r, (9, 13)))],
         lambda P, i, t: F.embedding(i, t))


# ---------------------------------------------------------------------------
# RoPE


def rope_ref(x, pos0, theta):
    """Interleaved pairs: x'[2k] = x[2k]cos - x[2k+1]sin, x'[2k+1] = x[2k]sin + x[2k+1]cos,
    angle (pos0+t)·theta^(-2k/D) for row t of the (…, T, D) input."""
    T, D = x.shape[-2], x.shape[-1]
    k = torch.arange(D // 2, dtype=torch.float64)
    inv = theta ** (-2.0 * k / D)
    pos = torch.arange(pos0, pos0 + T, dtype=torch.float64)
    ang = (pos[:, None] * inv[None, :]).to(x.dtype)  # (T, D/2)
    cos, sin = torch.cos(ang), torch.sin(ang)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y0 = x0 * cos - x1 * sin
    y1 = x0 * sin + x1 * cos
    return torch.stack([y0, y1], dim=-1).reshape(x.shape)


def rope():
    fam = "rope"

    def mk(name, shape, pos0, theta=None, permute=None, transpose=()):
        r = rng(fam + "/" + name)
        P = {"pos0": pos0}
        if theta is not None:
            P["theta"] = theta
        case(fam, name, "rope", [In("x", normal(r, shape))],
             lambda P, x: rope_ref(x, P["pos0"], P.get("theta", 10000.0)), params=P, permute=permute,
             transpose=transpose)

    mk("b1h2t7d8_pos0", (1, 2, 7, 8), 0)
    mk("b2h3t5d16_pos13", (2, 3, 5, 16), 13)
    mk("t33d16_pos0", (1, 1, 33, 16), 0)
    mk("t9d64_pos1", (1, 1, 9, 64), 1)
    mk("2d_t7d16_pos3", (7, 16), 3)
    mk("decode_t1d32_pos40", (2, 2, 1, 32), 40)
    mk("permuted_bthd", (2, 6, 3, 8), 2, permute={0: [0, 2, 1, 3]})
    mk("theta_500000_pos5", (1, 2, 6, 16), 5, theta=500000.0)


# ---------------------------------------------------------------------------
# Attention


def attention_ref(q, k, v, causal, scale):
    H, Tq, Hkv, Tk = q.shape[1], q.shape[2], k.shape[1], k.shape[2]
    rep = H // Hkv
    k = k.repeat_interleave(rep, dim=1)  # query head h reads kv head h // rep
    v = v.repeat_interleave(rep, dim=1)
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:
        qpos = torch.arange(Tq)[:, None] + (Tk - Tq)  # query i sits at position Tk-Tq+i
        kpos = torch.arange(Tk)[None, :]
        s = s.masked_fill(kpos > qpos, -math.inf)
    return torch.matmul(torch.softmax(s, dim=-1), v)


def attention():
    fam = "attention"

    def mk(name, B, H, Hkv, Tq, Tk, D, causal, scale=None, qscale=1.0, permute=None):
        r = rng(fam + "/" + name)
        P = {"causal": causal}
        if scale is not None:
            P["scale"] = scale
        qs, ks = (B, H, Tq, D), (B, Hkv, Tk, D)
        if permute:  # stored as (B, T, H, D), fed as (B, H, T, D)
            qs, ks = (B, Tq, H, D), (B, Tk, Hkv, D)
            permute = {0: [0, 2, 1, 3], 1: [0, 2, 1, 3], 2: [0, 2, 1, 3]}
        ins = [In("q", normal(r, qs, qscale)), In("k", normal(r, ks)), In("v", normal(r, ks))]
        case(fam, name, "attention", ins,
             lambda P, q, k, v: attention_ref(q, k, v, P["causal"], P.get("scale", 1.0 / math.sqrt(q.shape[-1]))),
             params=P, permute=permute)

    mk("mha_causal_b2h2t7d8", 2, 2, 2, 7, 7, 8, True)
    mk("mha_full_b2h2t7d8", 2, 2, 2, 7, 7, 8, False)
    mk("gqa_causal_h4kv2_t9d16", 1, 4, 2, 9, 9, 16, True)
    mk("gqa_full_h4kv2_t9d16", 1, 4, 2, 9, 9, 16, False)
    mk("mqa_causal_h4kv1_t7d8", 2, 4, 1, 7, 7, 8, True)
    mk("decode_causal_tq1_tk9", 1, 4, 2, 1, 9, 16, True)
    mk("decode_causal_tq3_tk10", 2, 2, 1, 3, 10, 8, True)
    mk("decode_full_tq3_tk10", 1, 2, 2, 3, 10, 8, False)
    mk("full_tq9_tk5", 1, 2, 1, 9, 5, 8, False)
    mk("causal_t33_h2kv1_d8", 1, 2, 1, 33, 33, 8, True)
    mk("full_t33_h1kv1_d8", 1, 1, 1, 33, 33, 8, False)
    mk("causal_t7_d64", 1, 1, 1, 7, 7, 64, True)
    mk("causal_t12_d32_gqa", 1, 2, 1, 12, 12, 32, True)
    mk("causal_t1", 1, 2, 2, 1, 1, 8, True)
    mk("scaled_causal_0.3", 1, 2, 2, 7, 7, 8, True, scale=0.3)
    mk("sharp_scores_causal", 1, 2, 1, 9, 9, 16, True, qscale=6.0)
    mk("permuted_bthd_causal", 2, 4, 2, 5, 5, 8, True, permute=True)


# ---------------------------------------------------------------------------
# Cross-entropy


def cross_entropy():
    fam = "cross_entropy"

    def ce(P, x, t):
        V = x.shape[-1]
        return F.cross_entropy(x.reshape(-1, V), t.reshape(-1).long(), ignore_index=P["ignore"], reduction="mean")

    r = rng("cross_entropy/basic")
    x = normal(r, (8, 11), 2.0)
    t = r.integers(0, 11, (8,))
    t[2] = t[6] = -100
    x[0, t[0]] = 120.0  # a large logit on the target: exp overflows float32 unless shifted
    x[1, (t[1] + 1) % 11] = 120.0  # a large logit off the target: loss ≈ 120
    x[2, 0] = 150.0  # on an ignored row
    case(fam, "ignore_neg100_large_logits", "cross_entropy", [In("logits", x), In("targets", t)], ce,
         params={"ignore": -100})
    r = rng("cross_entropy/3d")
    x = normal(r, (2, 5, 7))
    t = r.integers(0, 7, (2, 5))
    t[0, 1] = t[1, 4] = 3
    case(fam, "3d_ignore_3", "cross_entropy", [In("logits", x), In("targets", t)], ce, params={"ignore": 3})
    r = rng("cross_entropy/v257")
    x = normal(r, (6, 257), 3.0)
    x[3] -= 1e4  # every logit very negative
    t = r.integers(0, 257, (6,))
    case(fam, "v257_none_ignored", "cross_entropy", [In("logits", x), In("targets", t)], ce, params={"ignore": -1})
    r = rng("cross_entropy/t")
    x = normal(r, (9, 5))
    t = r.integers(0, 9, (5,))
    t[4] = -100
    case(fam, "t_logits", "cross_entropy", [In("logits", x), In("targets", t)], ce, params={"ignore": -100},
         transpose=[0])
    r = rng("cross_entropy/all_ignored")
    # Every row ignored: the mean over no rows is NaN (0/0), as in PyTorch,
    # and the gradient is zero.
    case(fam, "all_ignored_nan", "cross_entropy",
         [In("logits", normal(r, (3, 4))), In("targets", np.array([-100, -100, -100]))], ce, params={"ignore": -100})
    r = rng("cross_entropy/one_row")
    case(fam, "one_row", "cross_entropy", [In("logits", normal(r, (1, 6))), In("targets", np.array([5]))], ce,
         params={"ignore": -100})


def main():
    creation()
    unary()
    binary()
    reduce()
    matmul()
    movement()
    softmax()
    norms()
    embedding()
    rope()
    attention()
    cross_entropy()
    write()


if __name__ == "__main__":
    main()
