#!/usr/bin/env python3
"""Cross-check of Forge's safetensors package (forge/safetensors) against an
independent reader and writer written with the Python standard library.

The Go test TestPythonCompat runs, when /usr/bin/python3 exists:

    /usr/bin/python3 tests/safetensors_check.py GO_FILE PY_FILE [--no-torch]

GO_FILE is a file the Go package wrote (the tensors listed in GO_EXPECTED
below, plus a float32 tensor "f32.round_src" and its F16 and BF16
roundings). The script

  1. parses it with struct and json only, checking the layout: 8-byte
     little-endian header length, a header that is a multiple of 8 bytes,
     valid UTF-8 JSON without repeated keys, known dtypes, byte ranges that
     match shape x dtype size, tile the data buffer exactly and start at a
     multiple of their element size from the start of the file;
  2. checks every value, and the F16 / BF16 roundings against references
     computed here (struct's "e" format for F16; nearest-value search with
     ties to even for BF16);
  3. re-encodes what it read in the canonical form the Go writer promises
     (largest element size first, then name; "__metadata__" first with
     sorted keys; compact JSON padded with spaces to 8 bytes) and requires
     the bytes to be identical;
  4. if `import torch` works (Debian's python3-torch has no safetensors
     module, so tensors are built with torch.frombuffer), loads every
     tensor into torch and compares values, and compares the F16 / BF16
     roundings with torch's own float32 -> half / bfloat16 casts;
  5. writes PY_FILE with the layout in PY_TENSORS: tensors in an order that
     is neither sorted nor aligned, header keys in another order, fields in
     another order, spaces in the JSON, "__metadata__" last and no padding.
     The Go test reads it back and compares with its own copy of the
     expected values.

It prints one line per step and exits with status 1 and a message naming the
tensor on the first mismatch.
"""

import json
import math
import struct
import sys

# Element size and struct format of each dtype. BF16 is read as raw uint16
# and widened by hand; the F8 formats are compared as raw bytes.
DTYPES = {
    "BOOL": (1, "?"), "U8": (1, "B"), "I8": (1, "b"),
    "F8_E5M2": (1, None), "F8_E4M3": (1, None),
    "I16": (2, "h"), "U16": (2, "H"), "F16": (2, "e"), "BF16": (2, "H"),
    "I32": (4, "i"), "U32": (4, "I"), "F32": (4, "f"),
    "I64": (8, "q"), "U64": (8, "Q"), "F64": (8, "d"),
}

# What the Go test writes besides the rounding tensors: name -> (dtype,
# shape, values). Keep in sync with compatTensors in
# forge/safetensors/safetensors_test.go.
GO_EXPECTED = {
    "f32.matrix": ("F32", [2, 3], [-1.0, -0.5, 0.0, 0.5, 1.0, 1.5]),
    "f64.vector": ("F64", [4], [1.0 / (i + 1) for i in range(4)]),
    "i32.ids": ("I32", [5], [-2147483648, -1, 0, 1, 2147483647]),
    "i64.big": ("I64", [2], [-(1 << 62), (1 << 62) + 1]),
    "u8.bytes": ("U8", [3], [0, 127, 255]),
    "bool.mask": ("BOOL", [2, 2], [True, False, False, True]),
    "scalar": ("F32", [], [3.25]),
    "empty": ("F32", [0, 4], []),
}
GO_METADATA = {
    "format": "pt",
    "producer": 'forge "go" test',
    "unicode": "h\u00e9llo \u2192 w\u00f6rld",
    "control": "tab\there\nnext\x01",
}

# What this script writes, in buffer order: (name, dtype, shape, values).
# Keep in sync with pythonTensors in safetensors_test.go.
PY_TENSORS = [
    ("z.first", "U8", [3], [1, 2, 3]),
    ("b.f32", "F32", [2, 2], [1.5, -2.0, 0.001, 7.0]),
    ("a.i64", "I64", [], [-5]),
    ("m.f16", "F16", [2], [0.5, -65504.0]),
    ("m.bf16", "BF16", [2], [1.0, -3.0]),
    ("e.empty", "I32", [2, 0], []),
    ("d.f64", "F64", [3], [math.pi, -0.0, 1e300]),
    ("c.bool", "BOOL", [4], [True, False, False, True]),
]
PY_METADATA = {"source": "python", "note": "written by tests/safetensors_check.py"}


class Mismatch(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Mismatch(msg)


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f32_from_bits(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def decode(dtype, raw):
    size, fmt = DTYPES[dtype]
    if fmt is None:
        return list(raw)
    vals = list(struct.unpack("<%d%s" % (len(raw) // size, fmt), raw))
    if dtype == "BF16":
        vals = [f32_from_bits(h << 16) for h in vals]
    return vals


def encode(dtype, values):
    size, fmt = DTYPES[dtype]
    if dtype == "BF16":
        values = [f32_bits(v) >> 16 for v in values]  # exact for our values
    return struct.pack("<%d%s" % (len(values), fmt), *values)


def same(a, b):
    """Equal values; NaN equals NaN and the sign of zero counts."""
    if isinstance(a, float) or isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


def no_duplicates(pairs):
    d = {}
    for k, v in pairs:
        check(k not in d, "header repeats the key %r" % k)
        d[k] = v
    return d


def read(path):
    """Parses and validates a safetensors file; returns (header_len,
    metadata, [(name, dtype, shape, begin, end)] in buffer order, buffer)."""
    with open(path, "rb") as f:
        data = f.read()
    check(len(data) >= 8, "file shorter than 8 bytes")
    (n,) = struct.unpack_from("<Q", data, 0)
    check(8 + n <= len(data), "header length %d beyond the file" % n)
    text = data[8:8 + n].decode("utf-8")
    check(text.startswith("{"), "header does not start with '{'")
    header = json.loads(text, object_pairs_hook=no_duplicates)
    buf = data[8 + n:]
    meta = header.pop("__metadata__", {})
    check(isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values()),
          "__metadata__ is not a map of strings")
    entries = []
    for name, e in header.items():
        check(set(e) == {"dtype", "shape", "data_offsets"}, "%s: fields %s" % (name, sorted(e)))
        check(e["dtype"] in DTYPES, "%s: unknown dtype %r" % (name, e["dtype"]))
        shape = e["shape"]
        check(all(isinstance(d, int) and d >= 0 for d in shape), "%s: bad shape %r" % (name, shape))
        begin, end = e["data_offsets"]
        check(0 <= begin <= end <= len(buf), "%s: offsets %r outside the buffer" % (name, e["data_offsets"]))
        check(end - begin == numel(shape) * DTYPES[e["dtype"]][0],
              "%s: %d bytes for shape %r of %s" % (name, end - begin, shape, e["dtype"]))
        entries.append((name, e["dtype"], shape, begin, end))
    entries.sort(key=lambda e: (e[3], e[4]))
    pos = 0
    for name, _, _, begin, end in entries:
        check(begin == pos, "%s: begins at %d, previous tensor ends at %d" % (name, begin, pos))
        pos = end
    check(pos == len(buf), "tensors cover %d of %d buffer bytes" % (pos, len(buf)))
    return n, meta, entries, buf


def f16_reference(x):
    """x rounded to binary16 by CPython's struct (ties to even)."""
    try:
        return struct.unpack("<e", struct.pack("<e", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def bf16_reference(x):
    """x (a float32 value) rounded to the nearest bfloat16, ties to even,
    found by comparing the distances to the two neighbours."""
    if math.isnan(x) or math.isinf(x):
        return x
    lo_bits = f32_bits(x) & 0xFFFF0000  # toward zero
    hi_bits = lo_bits + 0x10000  # away from zero
    lo = f32_from_bits(lo_bits)
    if hi_bits & 0x7F800000 == 0x7F800000:
        hi = math.copysign(2.0 ** 128, x)  # where infinity begins
    else:
        hi = f32_from_bits(hi_bits)
    dlo, dhi = abs(x - lo), abs(hi - x)  # exact in float64
    if dlo < dhi or (dlo == dhi and (lo_bits >> 16) & 1 == 0):
        return lo
    return f32_from_bits(hi_bits)


def canonical(meta, tensors):
    """The bytes the Go writer must produce for these tensors, given as
    (name, dtype, shape, raw bytes)."""
    order = sorted(tensors, key=lambda t: (-DTYPES[t[1]][0], t[0]))
    header = {}
    if meta:
        header["__metadata__"] = dict(sorted(meta.items()))
    pos = 0
    for name, dtype, shape, raw in order:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(raw)]}
        pos += len(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in order)


def check_go_file(path):
    n, meta, entries, buf = read(path)
    check(n % 8 == 0, "header length %d is not a multiple of 8" % n)
    check(meta == GO_METADATA, "metadata %r, want %r" % (meta, GO_METADATA))
    raw = {name: buf[b:e] for name, _, _, b, e in entries}
    info = {name: (dtype, shape) for name, dtype, shape, _, _ in entries}
    for name, dtype, shape, begin, _ in entries:
        check((8 + n + begin) % DTYPES[dtype][0] == 0, "%s: not aligned to its element size" % name)
    check(set(info) == set(GO_EXPECTED) | {"f32.round_src", "f16.round", "bf16.round"},
          "tensors %s" % sorted(info))

    for name, (dtype, shape, want) in GO_EXPECTED.items():
        check(info[name] == (dtype, shape), "%s: %r, want %r" % (name, info[name], (dtype, shape)))
        got = decode(dtype, raw[name])
        check(len(got) == len(want) and all(same(g, w) for g, w in zip(got, want)),
              "%s: values %r, want %r" % (name, got, want))

    src = decode("F32", raw["f32.round_src"])
    shape = info["f32.round_src"][1]
    check(info["f16.round"] == ("F16", shape) and info["bf16.round"] == ("BF16", shape), "rounding tensor shapes")
    for kind, ref in (("f16.round", f16_reference), ("bf16.round", bf16_reference)):
        got = decode(info[kind][0], raw[kind])
        for x, g in zip(src, got):
            check(same(g, ref(x)), "%s: %r rounds to %r, want %r" % (kind, x, g, ref(x)))
    print("python: %s: %d tensors, layout and values ok (%d F16/BF16 roundings)" % (path, len(entries), len(src)))

    want = canonical(meta, [(name, dtype, shape, raw[name]) for name, dtype, shape, _, _ in entries])
    with open(path, "rb") as f:
        check(f.read() == want, "the file differs from the canonical encoding of its own content")
    print("python: bytes equal the canonical encoding")
    return entries, buf


def check_torch(go_entries, go_buf, py_path):
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means no torch
        print("torch: skipped (import torch failed: %s)" % e)
        return
    if sys.byteorder != "little":
        print("torch: skipped (big-endian host)")
        return
    tdt = {
        "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
        "I32": torch.int32, "I64": torch.int64, "F16": torch.float16,
        "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
    }

    def load(entries, buf):
        out = {}
        for name, dtype, shape, b, e in entries:
            if numel(shape) == 0:
                out[name] = torch.empty(shape, dtype=tdt[dtype])
            else:
                out[name] = torch.frombuffer(bytearray(buf[b:e]), dtype=tdt[dtype]).reshape(shape)
        return out

    got = load(go_entries, go_buf)
    for name, (dtype, shape, want) in GO_EXPECTED.items():
        w = torch.tensor(want, dtype=tdt[dtype]).reshape(shape)
        check(torch.equal(got[name], w), "torch: %s: %r, want %r" % (name, got[name], w))
    src = got["f32.round_src"]
    for kind, dt, view in (("f16.round", torch.float16, torch.int16), ("bf16.round", torch.bfloat16, torch.int16)):
        mine, theirs = got[kind], src.to(dt)
        nan = torch.isnan(theirs)
        check(torch.equal(torch.isnan(mine), nan), "torch: %s: NaN positions differ" % kind)
        bad = (mine.view(view) != theirs.view(view)) & ~nan
        check(not bool(bad.any()), "torch: %s: %r round to %r, torch gives %r" % (kind, src[bad], mine[bad], theirs[bad]))

    _, _, py_entries, py_buf = read(py_path)
    loaded = load(py_entries, py_buf)
    for name, dtype, shape, values in PY_TENSORS:
        w = torch.tensor(values, dtype=tdt[dtype]).reshape(shape)
        check(torch.equal(loaded[name], w), "torch: %s (python file): %r, want %r" % (name, loaded[name], w))
    print("torch %s: %d + %d tensors loaded and compared, F16/BF16 roundings match torch's casts"
          % (torch.__version__, len(got), len(loaded)))


def write_py_file(path):
    buf = b""
    entries = []
    for name, dtype, shape, values in PY_TENSORS:
        raw = encode(dtype, values)
        check(len(raw) == numel(shape) * DTYPES[dtype][0], "PY_TENSORS entry %s is inconsistent" % name)
        entries.append((name, {"data_offsets": [len(buf), len(buf) + len(raw)], "dtype": dtype, "shape": shape}))
        buf += raw
    # Header keys in reverse buffer order, metadata last, default json
    # separators (with spaces), no padding.
    header = dict(reversed(entries))
    header["__metadata__"] = PY_METADATA
    text = json.dumps(header).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + buf)
    # Read it back with the checks above, as a sanity check of this script.
    read(path)
    print("python: wrote %s (%d tensors, header %d bytes, unaligned)" % (path, len(entries), len(text)))


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    if len(args) != 2 or any(a not in ("--no-torch",) for a in argv if a.startswith("--")):
        print(__doc__, file=sys.stderr)
        return 2
    go_path, py_path = args
    try:
        entries, buf = check_go_file(go_path)
        write_py_file(py_path)
        if "--no-torch" in argv:
            print("torch: skipped (--no-torch)")
        else:
            check_torch(entries, buf, py_path)
    except Mismatch as e:
        print("FAIL: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
