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
    uint n;         // pairs in all: rows · half_dim
    uint half_dim;  // D/2
    uint t;         // T: rows per position cycle
    uint p0;        // table row of position pos0
    float sign;     // 1: rotate by φ, −1: by −φ
    uint ndim;      // 1 … ROPE_MAX_DIMS row axes
    uint shape[ROPE_MAX_DIMS];
    int strides[ROPE_MAX_DIMS];
};

constant bool rope_flat [[function_constant(0)]];

// Storage types: loads widen to float32 (forge_widen, exact); stores round
// once (forge_narrow: the prelude, forge_half.h).

template <typename T>
kernel void rope_t(device T* y [[buffer(0)]],
                   const device T* x [[buffer(1)]],
                   const device float2* table [[buffer(2)]],
                   constant RopeParams& p [[buffer(3)]],
                   uint gid [[thread_position_in_grid]],
                   uint gsize [[threads_per_grid]]) {
    for (uint i = gid; i < p.n; i += gsize) {
        const uint row = i / p.half_dim;
        const uint k = i - row * p.half_dim;
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
        const float2 cs = table[ulong(p.p0 + row % p.t) * p.half_dim + k];
        const float s = p.sign * cs.y;
        const float a = forge_widen(x[off + int(2 * k)]);
        const float b = forge_widen(x[off + int(2 * k + 1)]);
        const ulong o = ulong(row) * (2 * p.half_dim) + 2 * k;
        y[o] = forge_narrow<T>(fma(a, cs.x, -(b * s)));
        y[o + 1] = forge_narrow<T>(fma(a, s, b * cs.x));
    }
}

template [[host_name("rope_f32")]] [[kernel]] void rope_t<float>(device float*, const device float*, const device float2*, constant RopeParams&, uint, uint);
template [[host_name("rope_f16")]] [[kernel]] void rope_t<half>(device half*, const device half*, const device float2*, constant RopeParams&, uint, uint);
template [[host_name("rope_bf16")]] [[kernel]] void rope_t<bfloat>(device bfloat*, const device bfloat*, const device float2*, constant RopeParams&, uint, uint);
