// rope.metal — Backend.RoPE and StridedRoPE.RoPEStrided: rotary position
// embedding of interleaved pairs (GPT-J convention), on float32, float16 or
// bfloat16 (rope_f32, rope_f16, rope_bf16: x and y of one dtype). 16-bit
// elements widen exactly on load, the rotation runs in float32 with the
// same float32 table, and each output rounds once on store.
//
// x is (…, T, D): rows of D (the last axis, contiguous) whose other axes
// may have any strides; y is contiguous of x's shape (y may be x when x is
// contiguous: each pair is read and written by one thread). Pair k of the
// row at position t = row mod T rotates by φ = (pos0 + t)·θ^(−2k/D):
//
//   y[2k]   = x[2k]·cos φ − x[2k+1]·sign·sin φ
//   y[2k+1] = x[2k]·sign·sin φ + x[2k+1]·cos φ        (sign −1: inverse)
//
// cos φ and sin φ come from a table (float2 per position and pair) that the
// Go side computes in float64 and rounds to float32: float32 angles lose
// precision fast (at position 4096 an angle is off by up to 2.4e-4 rad), a
// float64 table makes the rotation as accurate as its float32 arithmetic.
//
// One thread per pair (grid-stride loop over rows·D/2 pairs). The row axes
// (every axis but the last, coalesced by the Go side) are described by
// shape/strides; row r's first element is at Σ_d idx_d·strides[d].
//
// Function constants:
//   0 rope_flat (bool): one row axis (ndim == 1): row r is at r·strides[0]
//                       (a contiguous x has strides[0] = D).
#include <metal_stdlib>
using namespace metal;

enum : uint { ROPE_MAX_DIMS = 8 };

struct RopeParams {
    uint n;       // pairs in all: rows · half
    uint half;    // D/2
    uint t;       // T: rows per position cycle
    uint p0;      // table row of position pos0
    float sign;   // 1: rotate by φ, −1: by −φ
    uint ndim;    // 1 … ROPE_MAX_DIMS row axes
    uint shape[ROPE_MAX_DIMS];
    int strides[ROPE_MAX_DIMS];
};

constant bool rope_flat [[function_constant(0)]];

// Storage types: loads widen to float32 (exact); stores round once: float
// → half by the hardware conversion (round to nearest even), float →
// bfloat to nearest even in integer arithmetic (NaN stays NaN, quiet), as
// forge/half rounds.
static inline float rope_load(float x) { return x; }
static inline float rope_load(half x) { return float(x); }
static inline float rope_load(bfloat x) { return as_type<float>(uint(as_type<ushort>(x)) << 16); }

template <typename T> static inline T rope_store(float x);
template <> inline float rope_store<float>(float x) { return x; }
template <> inline half rope_store<half>(float x) { return half(x); }
template <> inline bfloat rope_store<bfloat>(float x) {
    uint u = as_type<uint>(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return as_type<bfloat>(ushort((u >> 16) | 0x40u));
    }
    return as_type<bfloat>(ushort((u + 0x7fffu + ((u >> 16) & 1u)) >> 16));
}

template <typename T>
kernel void rope_t(device T* y [[buffer(0)]],
                   const device T* x [[buffer(1)]],
                   const device float2* table [[buffer(2)]],
                   constant RopeParams& p [[buffer(3)]],
                   uint gid [[thread_position_in_grid]],
                   uint gsize [[threads_per_grid]]) {
    for (uint i = gid; i < p.n; i += gsize) {
        const uint row = i / p.half;
        const uint k = i - row * p.half;
        int off;
        if (rope_flat) {
            off = int(row) * p.strides[0];
        } else {
            off = 0;
            uint r = row;
            for (int d = int(p.ndim) - 1; d >= 0; d--) {
                uint c = r % p.shape[d];
                r /= p.shape[d];
                off += int(c) * p.strides[d];
            }
        }
        const float2 cs = table[ulong(p.p0 + row % p.t) * p.half + k];
        const float s = p.sign * cs.y;
        const float a = rope_load(x[off + int(2 * k)]);
        const float b = rope_load(x[off + int(2 * k + 1)]);
        const ulong o = ulong(row) * (2 * p.half) + 2 * k;
        y[o] = rope_store<T>(fma(a, cs.x, -(b * s)));
        y[o + 1] = rope_store<T>(fma(a, s, b * cs.x));
    }
}

template [[host_name("rope_f32")]] [[kernel]] void rope_t<float>(device float*, const device float*, const device float2*, constant RopeParams&, uint, uint);
template [[host_name("rope_f16")]] [[kernel]] void rope_t<half>(device half*, const device half*, const device float2*, constant RopeParams&, uint, uint);
template [[host_name("rope_bf16")]] [[kernel]] void rope_t<bfloat>(device bfloat*, const device bfloat*, const device float2*, constant RopeParams&, uint, uint);
